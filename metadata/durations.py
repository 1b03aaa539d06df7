"""Parsing of WAIT durations ("30s", "5m", "2h", "1d" or seconds, and
Conductor's forms: "30 seconds", "5 mins", "1 hour", "2 days 3 hours") and
instants."""

from __future__ import annotations

import datetime as dt
import math
import re
import zoneinfo
from typing import Any

_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
# Conductor's (DateTimeUtils): any of days, hours, minutes, seconds, in that order.
_UNIT_WORDS = {
    "d": ("d", "day", "days"),
    "h": ("h", "hr", "hrs", "hour", "hours"),
    "m": ("m", "min", "mins", "minute", "minutes"),
    "s": ("s", "sec", "secs", "second", "seconds"),
}
_WORDED = re.compile(
    r"^\s*"
    + "".join(
        rf"(?:(\d+(?:\.\d+)?)\s*(?:{'|'.join(sorted(words, key=len, reverse=True))})\b\s*)?"
        for words in _UNIT_WORDS.values()
    )
    + r"$",
    re.IGNORECASE,
)


def parse_duration(value: Any) -> float:
    """Seconds in ``value``; raises ValueError naming the accepted forms."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):  # NaN passes every comparison, so say it first
            raise ValueError("must be a finite number of seconds")
        if value < 0:
            raise ValueError("must not be negative")
        return float(value)
    match = _DURATION.match(value) if isinstance(value, str) else None
    if match is not None:
        return float(match.group(1)) * _UNITS_S[match.group(2) or "s"]
    worded = _WORDED.match(value) if isinstance(value, str) and value.strip() else None
    if worded is None or not any(worded.groups()):
        raise ValueError('must be seconds or a string like "30s", "5m", "2h", "1d", "30 seconds", "1 hour 5 minutes"')
    return sum(
        float(amount) * _UNITS_S[unit] for amount, unit in zip(worded.groups(), _UNIT_WORDS, strict=True) if amount
    )


def parse_instant(value: Any) -> dt.datetime:
    """An ISO 8601 time, or Conductor's ``2026-12-25 09:00 PST`` (a date, a
    time, a zone: an offset, a tz database name or a common abbreviation);
    a time without a zone is taken as UTC."""
    if not isinstance(value, str):
        raise ValueError(_INSTANT_FORMS)
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        parsed = _conductor_instant(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


_INSTANT_FORMS = 'must be an ISO 8601 time such as 2026-12-01T09:00:00Z, or "2026-12-01 09:00 PST"'
_CONDUCTOR_INSTANT = re.compile(
    r"^\s*(\d{4}-\d{2}-\d{2})(?:[ T](\d{1,2}:\d{2}(?::\d{2})?))?\s*([A-Za-z][A-Za-z_/+\-]*|[+-]\d{2}:?\d{2})?\s*$"
)
# Abbreviations Conductor's examples use (hours from UTC); anything else by its tz database name.
_ZONE_ABBREVIATIONS = {
    "UTC": 0,
    "GMT": 0,
    "Z": 0,
    "PST": -8,
    "PDT": -7,
    "MST": -7,
    "MDT": -6,
    "CST": -6,
    "CDT": -5,
    "EST": -5,
    "EDT": -4,
    "BST": 1,
    "CET": 1,
    "CEST": 2,
    "EET": 2,
    "EEST": 3,
    "IST": 5.5,
    "JST": 9,
}


def _conductor_instant(value: str) -> dt.datetime:
    match = _CONDUCTOR_INSTANT.match(value)
    if match is None:
        raise ValueError(_INSTANT_FORMS)
    date, time_of_day, zone = match.groups()
    try:
        parsed = dt.datetime.fromisoformat(f"{date}T{time_of_day or '00:00'}")
    except ValueError as exc:
        raise ValueError(_INSTANT_FORMS) from exc
    return parsed.replace(tzinfo=_zone(zone)) if zone else parsed


def _zone(name: str) -> dt.tzinfo:
    if name.upper() in _ZONE_ABBREVIATIONS:
        return dt.timezone(dt.timedelta(hours=_ZONE_ABBREVIATIONS[name.upper()]))
    if name[0] in "+-":
        return dt.datetime.strptime(name.replace(":", ""), "%z").tzinfo or dt.UTC
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"{_INSTANT_FORMS} (unknown time zone {name!r})") from exc
