"""Sandboxed JavaScript (V8 through mini-racer): SWITCH and DO_WHILE
conditions, and the INLINE system task.

The sandbox has no I/O at all (no require, no fetch, no timers, no
WebAssembly); each call runs under a time limit and a memory limit. The
memory limit holds twice: V8 bounds the heap, and the lock-down in
``sandbox.js``, run before the script, bounds array buffers' bytes (which
live outside the heap) to the same figure. ``$`` is bound to the input. The
code may be an expression (``$.n > 3``) or statements whose completion value
is the result (``if ($.n > 3) { true } else { false }``). Every evaluation
gets a fresh V8 context: a script can change its globals (``JSON.parse``,
``Object.prototype``), and a context kept for the next script, of any
execution or namespace, would carry that change (and whatever it captured)
into it. A fresh context costs a few milliseconds.
"""

from __future__ import annotations

import json
import pathlib
import threading
from dataclasses import dataclass
from typing import Any

from py_mini_racer import MiniRacer
from py_mini_racer import _exc as js_exc

from executions.json_values import is_storable, nested_deeper_than

TIMED_OUT_CLOSE_DELAY_S = 1.0
LOCK_DOWN = (pathlib.Path(__file__).with_name("sandbox.js")).read_text(encoding="utf-8")
MiB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """What one evaluation may take. The defaults are the decider's (SWITCH
    and DO_WHILE conditions); ``max_result_bytes`` and ``max_depth`` hold a
    result to what any task output is held to."""

    timeout_s: float = 0.5
    max_memory: int = 32 * MiB
    max_result_bytes: int = 1_048_576  # NODE_FLOW_MAX_BODY_BYTES
    max_depth: int = 100  # NODE_FLOW_MAX_JSON_DEPTH


def task_limits(settings: Any) -> Limits:
    """The limits of the scripts of INLINE and HTTP_POLL tasks, from Django's
    ``settings`` (passed in: this module reads no configuration)."""
    return Limits(
        timeout_s=settings.NODE_FLOW_INLINE_TIMEOUT_SECONDS,
        max_memory=settings.NODE_FLOW_INLINE_MAX_MEMORY_MB * MiB,
        max_result_bytes=settings.NODE_FLOW_MAX_BODY_BYTES,
        max_depth=settings.NODE_FLOW_MAX_JSON_DEPTH,
    )


class ScriptError(Exception):
    """The script threw, did not parse, ran out of time or of memory."""


def evaluate(code: str, value: Any, limits: Limits = Limits()) -> Any:
    """Run ``code`` with ``$`` bound to ``value``; return its result as JSON data."""
    timeout_s, max_memory = limits.timeout_s, limits.max_memory
    # The input and the code travel as JSON string literals: nothing the user
    # writes is spliced into the program text outside a string.
    program = LOCK_DOWN.replace("__LIMIT__", str(int(max_memory))) + (
        f"(function(){{ const $ = JSON.parse({json.dumps(json.dumps(value))}); const __r = eval({json.dumps(code)});"
        " return __r === undefined ? null : JSON.stringify(__r); })()"
    )
    racer: MiniRacer | None  # None once a timer is left to close it
    racer = MiniRacer()
    try:
        result = racer.eval(program, timeout_sec=timeout_s, max_memory=max_memory)
    except js_exc.JSTimeoutException as exc:
        # V8 reports the terminated script after eval has given up on it; a
        # context closed before then logs "Event loop is closed" for it.
        closer = threading.Timer(TIMED_OUT_CLOSE_DELAY_S, racer.close)
        closer.daemon = True  # never keeps a stopping process waiting
        closer.start()
        racer = None
        raise ScriptError(f"script ran longer than {timeout_s} s") from exc
    except js_exc.JSOOMException as exc:
        raise ScriptError(f"script exceeded its memory limit ({max_memory // MiB} MiB)") from exc
    except js_exc.MiniRacerBaseException as exc:
        raise ScriptError(str(exc).strip().splitlines()[0] if str(exc).strip() else "script error") from exc
    finally:
        if racer is not None:
            racer.close()
    if result is None:
        return None
    if not isinstance(result, str):  # JSON.stringify gives undefined for a function or a symbol
        raise ScriptError("the script's result is not JSON data (a function or a symbol)")
    return _parsed(result, limits)


def _parsed(result: str, limits: Limits) -> Any:
    limit = limits.max_result_bytes
    if len(result) > limit or len(result.encode("utf-8")) > limit:
        # The same bound as any task output (a worker's outputData is one body).
        raise ScriptError(
            f"the script's result is larger than {limit} bytes (NODE_FLOW_MAX_BODY_BYTES, "
            "the limit of every task output)"
        )
    try:
        value = json.loads(result)
    except RecursionError:
        value, deep = None, True
    else:
        deep = nested_deeper_than(value, limits.max_depth)
    if deep:
        raise ScriptError(
            f"the script's result is nested deeper than {limits.max_depth} levels (NODE_FLOW_MAX_JSON_DEPTH)"
        )
    if not is_storable(value):
        raise ScriptError("the script's result holds a string that is not text (an unpaired UTF-16 surrogate or a NUL)")
    return value


def truthy(value: Any) -> bool:
    """JavaScript truthiness of a JSON value."""
    return value not in (None, False, 0, "", 0.0)
