"""Small filters of the operator pages: colours by status, durations, ages."""

from __future__ import annotations

import datetime as dt
import json

from django import template

from console import graph

register = template.Library()


@register.filter
def task_colour(status: str) -> str:
    return graph.STATUS_COLOURS.get(status, graph.STATUS_COLOURS[graph.NOT_STARTED])


@register.filter
def task_text_colour(status: str) -> str:
    return graph.text_colour(status)


@register.filter
def execution_colour(status: str) -> str:
    return graph.EXECUTION_COLOURS.get(status, "#636363")


@register.filter
def duration(value: dt.timedelta | None) -> str:
    """``0.25 s``, ``12.3 s``, ``4 min 05 s``, ``2 h 03 min``; blank for None."""
    if value is None:
        return ""
    seconds = value.total_seconds()
    if seconds < 60:
        return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


@register.simple_tag
def since(then: dt.datetime | None, now: dt.datetime) -> str:
    """How long ago ``then`` was, to the second (timesince stops at minutes)."""
    return "" if then is None else f"{duration(now - then)} ago"


@register.filter
def as_json(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)
