"""The one clock.

Every deadline, window and timestamp in Node Flow is read through ``now()`` so
tests can move time instead of sleeping through it (``travel_to``/``advance``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager

from django.utils import timezone

_offset = dt.timedelta(0)
_frozen: dt.datetime | None = None


def now() -> dt.datetime:
    """The current time, timezone-aware UTC."""
    if _frozen is not None:
        return _frozen
    return timezone.now() + _offset


@contextmanager
def travel_to(when: dt.datetime) -> Iterator[None]:
    """Freeze the clock at ``when`` for the duration of the block."""
    global _frozen
    previous, _frozen = _frozen, when
    try:
        yield
    finally:
        _frozen = previous


def advance(seconds: float) -> None:
    """Move the clock forward (frozen or not) by ``seconds``."""
    global _frozen, _offset
    delta = dt.timedelta(seconds=seconds)
    if _frozen is not None:
        _frozen += delta
    else:
        _offset += delta


def reset() -> None:
    global _frozen, _offset
    _frozen, _offset = None, dt.timedelta(0)
