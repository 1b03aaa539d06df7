"""Parsing of WAIT durations ("30s", "5m", "2h", "1d" or seconds) and instants."""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration(value: Any) -> float:
    """Seconds in ``value``; raises ValueError naming the accepted forms."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):  # NaN passes every comparison, so say it first
            raise ValueError("must be a finite number of seconds")
        if value < 0:
            raise ValueError("must not be negative")
        return float(value)
    match = _DURATION.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError('must be seconds or a string like "30s", "5m", "2h", "1d"')
    return float(match.group(1)) * _UNITS_S[match.group(2) or "s"]


def parse_instant(value: Any) -> dt.datetime:
    """An ISO 8601 time; a time without an offset is taken as UTC."""
    if not isinstance(value, str):
        raise ValueError("must be an ISO 8601 time such as 2026-12-01T09:00:00Z")
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError("must be an ISO 8601 time such as 2026-12-01T09:00:00Z") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
