"""Sandboxed JavaScript (V8 through mini-racer): SWITCH and DO_WHILE
conditions, and the INLINE system task.

The sandbox has no I/O at all (no require, no fetch, no timers); each call
runs under a time limit and a memory limit. ``$`` is bound to the input. The
code may be an expression (``$.n > 3``) or statements whose completion value
is the result (``if ($.n > 3) { true } else { false }``). One V8 isolate per
thread, since isolates are not shared between threads.
"""
from __future__ import annotations

import json
import threading
from typing import Any

from py_mini_racer import MiniRacer
from py_mini_racer import _exc as js_exc

DECIDER_TIMEOUT_S = 0.5
DECIDER_MAX_MEMORY_BYTES = 32 * 1024 * 1024

_local = threading.local()


class ScriptError(Exception):
    """The script threw, did not parse, ran out of time or of memory."""


def _isolate() -> MiniRacer:
    racer = getattr(_local, "racer", None)
    if racer is None:
        racer = _local.racer = MiniRacer()
    return racer


def evaluate(code: str, value: Any, *, timeout_s: float = DECIDER_TIMEOUT_S, max_memory: int = DECIDER_MAX_MEMORY_BYTES) -> Any:
    """Run ``code`` with ``$`` bound to ``value``; return its result as JSON data."""
    # The input and the code travel as JSON string literals: nothing the user
    # writes is spliced into the program text outside a string.
    program = (
        "(function(){ const $ = JSON.parse(%s); const __r = eval(%s);"
        " return __r === undefined ? null : JSON.stringify(__r); })()"
    ) % (json.dumps(json.dumps(value)), json.dumps(code))
    try:
        result = _isolate().eval(program, timeout_sec=timeout_s, max_memory=max_memory)
    except js_exc.JSTimeoutException as exc:
        raise ScriptError(f"script ran longer than {timeout_s} s") from exc
    except js_exc.JSOOMException as exc:
        _local.racer = None  # an isolate that hit its heap limit is not reused
        raise ScriptError(f"script exceeded its memory limit ({max_memory // (1024 * 1024)} MiB)") from exc
    except js_exc.MiniRacerBaseException as exc:
        raise ScriptError(str(exc).strip().splitlines()[0] if str(exc).strip() else "script error") from exc
    return None if result is None else json.loads(result)


def truthy(value: Any) -> bool:
    """JavaScript truthiness of a JSON value."""
    return value not in (None, False, 0, "", 0.0)
