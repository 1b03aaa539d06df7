"""Claim a due row, do its work, back off when the work fails: one unit of
the roles that drain a table of due rows (decide requests, timers,
schedules).

In one service transaction (``transactions.outermost``): ``claim`` takes the
next due row, locked with SKIP LOCKED so copies of a role spread out, and
``work`` runs in a savepoint. Work that raises is rolled back alone, logged,
and ``back_off`` moves the row on (later, or to its next firing) in the same
transaction, so one bad row never blocks the rows behind it nor is retried
hot, and the claim commits either way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from django.db import transaction

from nodeflow import transactions

log = logging.getLogger("nodeflow.claims")

T = TypeVar("T")


def claim_one[T](
    *,
    claim: Callable[[], T | None],
    work: Callable[[T], None],
    back_off: Callable[[T, Exception], None],
    what: Callable[[T], str],
) -> bool:
    """One unit: False when no row was due, else True (done or backed off)."""
    with transactions.outermost():
        row = claim()
        if row is None:
            return False
        try:
            with transaction.atomic():  # a savepoint: failing work leaves nothing half-done
                work(row)
        except Exception as exc:
            log.exception("%s failed; backing off", what(row))
            back_off(row, exc)
    return True
