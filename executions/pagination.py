"""Keyset pagination for execution lists: newest first, stable under inserts.
The cursor is opaque to clients (base64 of the last row's time and id)."""

from __future__ import annotations

import base64
import datetime as dt
import uuid

from django.db.models import Q, QuerySet

from nodeflow.errors import InvalidField


def _encode(created_at: dt.datetime, pk: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(f"{created_at.isoformat()}|{pk}".encode()).decode()


def _decode(cursor: str) -> tuple[dt.datetime, uuid.UUID]:
    try:
        created, pk = base64.urlsafe_b64decode(cursor.encode()).decode().split("|")
        return dt.datetime.fromisoformat(created), uuid.UUID(pk)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidField("cursor", "not a cursor this server gave out") from exc


def paginate(rows: QuerySet, *, cursor: str | None, limit: int) -> tuple[list, str | None]:
    """One page of ``rows`` (which have ``created_at`` and ``id``) and the next cursor."""
    if cursor:
        created, pk = _decode(cursor)
        rows = rows.filter(Q(created_at__lt=created) | Q(created_at=created, id__lt=pk))
    page = list(rows.order_by("-created_at", "-id")[: limit + 1])
    if len(page) <= limit:
        return page, None
    page = page[:limit]
    return page, _encode(page[-1].created_at, page[-1].id)


# --- an execution's tasks -----------------------------------------------------
# The current run's rows in seq order, a page at a time: the cursor is the
# run and the last seq shown (a restart's new run is not mixed into an
# older run's pages).


def _encode_task(run: int, seq: int) -> str:
    return base64.urlsafe_b64encode(f"t|{run}|{seq}".encode()).decode()


def _decode_task(cursor: str, field: str) -> tuple[int, int]:
    try:
        kind, run, seq = base64.urlsafe_b64decode(cursor.encode()).decode().split("|")
        if kind != "t":
            raise ValueError(kind)
        return int(run), int(seq)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidField(field, "not a cursor this server gave out") from exc


def task_page(
    rows: QuerySet, *, run: int, cursor: str | None, limit: int, cursor_field: str = "cursor"
) -> tuple[list, str | None]:
    """One page of an execution's task ``rows`` (of run ``run``), oldest
    first, and the next cursor (None on the last page)."""
    if cursor:
        run, after = _decode_task(cursor, cursor_field)
        rows = rows.filter(seq__gt=after)
    page = list(rows.filter(run=run).order_by("seq")[: limit + 1])
    if len(page) <= limit:
        return page, None
    page = page[:limit]
    return page, _encode_task(run, page[-1].seq)
