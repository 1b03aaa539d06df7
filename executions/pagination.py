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
