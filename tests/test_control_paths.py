"""Every way a worker task becomes leasable, against every task control.

Each row of PATHS is one path by which a task comes to wait in its queue: a
start, the next step after a result (single and batched), a retry delay
running out, a put-back (callbackAfterSeconds), an expired lease handed to
another worker, a resume, a manual retry. For each, with one holder already
in flight, the control (concurrentExecLimit 1, a semaphore of 1 permit, a
rate limit of 1 per window) lets nothing more through and names itself in
the task's ``blockedBy``; once the holder is gone (or the window turns), the
waiting task is leased. The lease path is one, so a control attached to it
must hold whichever way the task arrived. System tasks: test_system_task_controls.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.engine_helpers import advance, complete, execution, poll, poll_one, register, report, start, task_def

pytestmark = pytest.mark.django_db

QUEUE = "guarded"
RATE_WINDOW_S = 3600
WF = "wf_guarded"
TWO_STEP = "wf_two_step"


def _workflows(api) -> None:
    register(api, WF, {"name": QUEUE, "taskReferenceName": "g", "type": "SIMPLE"})
    register(
        api,
        TWO_STEP,
        {"name": "prep", "taskReferenceName": "p", "type": "SIMPLE"},
        {"name": QUEUE, "taskReferenceName": "g", "type": "SIMPLE"},
    )


# --- the paths: each prepares (before any control is set) and returns a
# function that makes the candidate task leasable, returning its execution id.


def _by_start(api) -> Callable[[], str]:
    return lambda: start(api, WF)["id"]


def _by_next_step(api) -> Callable[[], str]:
    run = start(api, TWO_STEP)["id"]
    prep = poll_one(api, "prep")
    return lambda: (complete(api, prep), run)[1]


def _by_next_step_batched(api) -> Callable[[], str]:
    run = start(api, TWO_STEP)["id"]
    prep = poll_one(api, "prep")

    def go() -> str:
        body = {"results": [{"taskId": prep["taskId"], "leaseToken": prep["leaseToken"], "status": "COMPLETED"}]}
        assert api.post("tasks/results", body).json()["results"][0]["status"] == 200
        return run

    return go


def _by_retry_delay(api) -> Callable[[], str]:
    run = start(api, WF)["id"]
    leased = poll_one(api, QUEUE)
    assert report(api, leased, "FAILED", reasonForIncompletion="boom").status_code == 200
    return lambda: (advance(5), run)[1]


def _by_callback(api) -> Callable[[], str]:
    run = start(api, WF)["id"]
    leased = poll_one(api, QUEUE)
    assert report(api, leased, "IN_PROGRESS", callbackAfterSeconds=5).status_code == 200
    return lambda: (advance(5), run)[1]


def _by_redelivery(api) -> Callable[[], str]:
    # Its worker goes silent and the 300 s default lease runs out: the same
    # attempt waits in the queue again before the holder is leased (an
    # in-flight task counts against the cap until then).
    run = start(api, WF)["id"]
    poll_one(api, QUEUE)
    advance(301)
    return lambda: run


def _by_resume(api) -> Callable[[], str]:
    run = start(api, WF)["id"]
    assert api.post(f"executions/{run}/pause").status_code == 200
    return lambda: (api.post(f"executions/{run}/resume"), run)[1]


def _by_manual_retry(api) -> Callable[[], str]:
    run = start(api, WF)["id"]
    leased = poll_one(api, QUEUE)
    assert report(api, leased, "FAILED_WITH_TERMINAL_ERROR", reasonForIncompletion="no").status_code == 200
    assert execution(api, run)["status"] == "FAILED"

    def go() -> str:
        response = api.post(f"executions/{run}/retry")
        assert response.status_code == 200, response.json()
        return run

    return go


PATHS = {
    "start": _by_start,
    "next step": _by_next_step,
    "next step, batched results": _by_next_step_batched,
    "retry delay": _by_retry_delay,
    "callbackAfterSeconds": _by_callback,
    "expired lease re-delivered": _by_redelivery,
    "resume": _by_resume,
    "manual retry": _by_manual_retry,
}


# --- the controls: each sets itself on the queue, and frees the holder.


def _cap(api) -> str:
    task_def(api, QUEUE, concurrentExecLimit=1, retryDelaySeconds=5, jitter=0, startToCloseTimeout=0)
    return "concurrentExecLimit"


def _semaphore(api) -> str:
    api.put("semaphores/one", {"permits": 1})
    task_def(api, QUEUE, semaphores=["one"], retryDelaySeconds=5, jitter=0, startToCloseTimeout=0)
    return "semaphore:one"


def _rate(api) -> str:
    task_def(
        api,
        QUEUE,
        rateLimitPerFrequency=1,
        rateLimitFrequencySeconds=RATE_WINDOW_S,
        retryDelaySeconds=5,
        jitter=0,
        startToCloseTimeout=0,
    )
    return "rateLimit"


CONTROLS = {"concurrentExecLimit": _cap, "semaphore": _semaphore, "rateLimit": _rate}


def _free(api, control: str, holder: dict) -> None:
    complete(api, holder)
    if control == "rateLimit":
        assert poll(api, QUEUE, count=10) == []  # completing does not refill a rate window; time does
        advance(RATE_WINDOW_S)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("control", CONTROLS)
def test_each_control_holds_on_each_path_a_task_becomes_leasable_by(api, frozen_clock, path, control):
    # The retry and lease policies are copied onto tasks when scheduled: set
    # them (without controls) first; the controls are live and come later.
    task_def(api, QUEUE, retryDelaySeconds=5, jitter=0, startToCloseTimeout=0)
    task_def(api, "prep")
    _workflows(api)
    make_leasable = PATHS[path](api)
    name = CONTROLS[control](api)
    holder_run = start(api, WF, priority=9)["id"]  # leased first, whatever else waits
    holder = poll_one(api, QUEUE, worker="holder")
    assert holder["executionId"] == holder_run

    candidate = make_leasable()

    assert poll(api, QUEUE, count=10) == []
    waiting = [t for t in execution(api, candidate)["tasks"] if t["path"] == "g" and t["status"] == "SCHEDULED"]
    assert len(waiting) == 1, execution(api, candidate)["tasks"]
    assert (waiting[0]["blockedBy"] or {}).get("control") == name, waiting[0]
    _free(api, name, holder)
    leased = poll(api, QUEUE, count=10)
    assert [t["executionId"] for t in leased] == [candidate]
