"""Fixed-window counters: the task rate limit (dispatches of a queue per
``rateLimitFrequencySeconds``) and the namespace's starts per minute.

The window is ``floor(now / size)``: one row per key holds the current
window's start and how much of it is used, and one upsert both counts and
moves the row on to a new window. A fixed window can admit up to twice the
limit across a boundary; the alternative (a sliding window) needs a
timestamp per event. Completing a task gives nothing back.
"""

from __future__ import annotations

import datetime as dt
import math

from django.db import connection

from quotas.models import RateWindow

STARTS_KEY = "@starts"  # a namespace's executions per minute (no queue name has "@" first but system ones)
STARTS_WINDOW_S = 60.0


def window_start(now: dt.datetime, size_s: float) -> float:
    return math.floor(now.timestamp() / size_s) * size_s


def window_end(start: float, size_s: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(start + size_s, tz=dt.UTC)


def used_in(*, namespace_id: int, key: str, start: float) -> int:
    """How much of the window beginning at ``start`` is used."""
    row = RateWindow.objects.filter(namespace_id=namespace_id, key=key).values_list("window_start", "used").first()
    return row[1] if row is not None and row[0] == start else 0


# Both backends take ``ON CONFLICT … DO UPDATE``; every SET expression reads
# the row as it was, so ``used`` compares the old window.
_SPEND_SQL = """
INSERT INTO quotas_ratewindow (namespace_id, "key", window_start, used) VALUES (%s, %s, %s, %s)
ON CONFLICT (namespace_id, "key") DO UPDATE SET
    used = CASE WHEN quotas_ratewindow.window_start = excluded.window_start
                THEN quotas_ratewindow.used + excluded.used ELSE excluded.used END,
    window_start = excluded.window_start
"""


def spend(*, namespace_id: int, key: str, start: float, count: int) -> None:
    """Count ``count`` more in the window beginning at ``start`` (one upsert)."""
    with connection.cursor() as cursor:
        cursor.execute(_SPEND_SQL, [namespace_id, key, start, count])
