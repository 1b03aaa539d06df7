"""Readying a long-running server process (a worker of the API server,
granian's or gunicorn's; ``nodeflow_run``; a role command) before its first
request or tick.

- **The URLconf is loaded now**, not by the first request: importing every
  view module (the console's, the API's) takes a few hundred milliseconds
  of CPU, which would otherwise land on whichever request comes first.
- **The garbage collector stops re-scanning what lives forever.** Once
  Django, the apps and the URLconf are loaded, the process holds about
  100,000 container objects that are never freed. ``gc.freeze()`` moves them
  out of the collector's generations, so no collection walks them again.
- **Young-generation collections are rarer** (``NODE_FLOW_GC_THRESHOLD``,
  default ``10000,10,10``). A request allocates thousands of objects that
  die by reference counting when it ends; with CPython's default threshold
  (700) a collection runs every few hundred allocations and promotes live
  request objects into older generations, whose collections are costly.
  A higher threshold means fewer, longer pauses: at 10,000 one takes about
  3 ms on the 2-core machine, at 50,000 about 30 ms, a latency spike for
  whichever request meets it. Measured on the batched worker routes (in
  process), the collector took 13 % of the CPU with CPython's settings,
  5 % with the heap frozen, and under 2 % with this threshold as well
  (docs/engine.md).

Cycles are still collected: only later, and never through the frozen heap.

- **A woken thread gets the GIL sooner** (``NODE_FLOW_SWITCH_INTERVAL_MS``,
  default 1 ms, CPython's is 5). A long-poll is woken by the listener
  thread, and a request thread that is building another answer holds the
  GIL meanwhile: each hand-off between threads waited up to the switch
  interval, a few milliseconds of every dispatch.
"""

from __future__ import annotations

import gc
import sys

from django.conf import settings
from django.urls import get_resolver


def ready_server_process() -> None:
    """Call once, after Django is set up and before serving or ticking."""
    get_resolver().url_patterns  # noqa: B018 - imports the URLconf and every view
    tune_gc(settings.NODE_FLOW_GC_THRESHOLD)
    sys.setswitchinterval(settings.NODE_FLOW_SWITCH_INTERVAL_MS / 1000)


def tune_gc(threshold: tuple[int, ...]) -> None:
    """Freeze what the process holds now out of the collector, and set its
    thresholds (empty: keep the interpreter's)."""
    gc.collect()
    gc.freeze()
    if threshold:
        gc.set_threshold(*threshold)
