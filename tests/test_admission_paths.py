"""Every way a root run becomes RUNNING, against every start control (issue
14; SPEC §6 and §8).

Each row of PATHS is one way a root run comes to be RUNNING: a start (alone
or through the bulk route), a schedule's firing, a retry, a restart, and a
failure workflow, which the engine starts itself. For each, one holder already running fills each
start control in turn: the definition's maxConcurrentExecutions (1), the
namespace quota maxConcurrentExecutions (1), rateLimitConfig (1 per key).
A path a client asks for is refused with a start's 429 and changes nothing
(a schedule records the refusal); under rateLimitConfig it waits, RUNNING,
awaitingAdmission, with nothing to lease. A failure workflow is never
refused: it waits, and its blockedBy names what it waits on. When the holder
ends, what waited is admitted, and what was refused goes through.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from executions.celery_tasks import sweep as celery_sweep
from executions.models import Execution, Task, Timer
from executions.roles.sweeper import SweeperRole
from nodeflow import clock
from quotas.models import HELD_LINE, Admission
from quotas.schedules import fire_next_schedule
from tests.controls_helpers import at
from tests.engine_helpers import (
    complete,
    execution,
    fail,
    no_retries,
    poll,
    poll_one,
    register,
    simple,
    start,
    sweep,
    task_at,
)

pytestmark = pytest.mark.django_db

TENANT = {"tenant": "acme"}
KEY = "${workflow.input.tenant}"
# A failure workflow's input carries the failed run's input.
FAILURE_KEY = "${workflow.input.input.tenant}"
CONTROLS = ("maxConcurrentExecutions", "quota", "rateLimitConfig")


@dataclass
class Answer:
    """What a path answered: a refusal (the 429 body), or the run it made RUNNING."""

    refusal: dict | None = None
    execution_id: str | None = None


@dataclass
class Scene:
    attempt: Callable[[], Answer]  # takes the path once
    holder: dict  # the leased task of the run that fills the control
    queue: str  # where the candidate's first task is leased from


def _fields(control: str, key: str = KEY) -> dict:
    """The definition fields of a controlled workflow (the quota is the namespace's)."""
    if control == "maxConcurrentExecutions":
        return {"maxConcurrentExecutions": 1}
    if control == "rateLimitConfig":
        return {"rateLimitConfig": {"rateLimitKey": key, "concurrentExecLimit": 1}}
    return {}


def _job(api, control: str | None, **fields) -> None:
    """``job``: one task on the queue ``work`` that fails for good, under ``control``."""
    no_retries(api, "work")
    register(api, "job", simple("work"), timeoutSeconds=3600, **(_fields(control) if control else {}), **fields)
    if control == "quota":
        assert api.put("quotas", {"maxConcurrentExecutions": 1}).status_code == 200


def _holder(api) -> dict:
    """A run of ``job`` that fills the control, its task leased."""
    holder = start(api, "job", TENANT)
    leased = poll_one(api, "work")
    assert leased["executionId"] == holder["id"]
    return leased


def _failed_job(api) -> str:
    failed = start(api, "job", TENANT)["id"]
    fail(api, poll_one(api, "work"), terminal=True)
    assert execution(api, failed)["status"] == "FAILED"
    return failed


def _answer(response) -> Answer:
    if response.status_code == 429:
        return Answer(refusal=response.json())
    assert response.status_code in (200, 201), response.json()
    return Answer(execution_id=response.json()["id"])


# --- the paths: each sets the scene (the control full) and returns it -------


def _by_start(api, control: str) -> Scene:
    _job(api, control)
    holder = _holder(api)
    return Scene(lambda: _answer(api.post("executions", {"name": "job", "input": TENANT})), holder, "work")


def _by_bulk_start(api, control: str) -> Scene:
    """A start through the bulk route (``POST …/executions/batch``); its
    answer is the batch's one answer (a refusal is the start's 429 body)."""
    _job(api, control)
    holder = _holder(api)

    def bulk() -> Answer:
        response = api.post("executions/batch", {"executions": [{"name": "job", "input": TENANT}]})
        assert response.status_code == 200, response.json()
        [answer] = response.json()["results"]
        if answer["status"] == 429:
            return Answer(refusal={k: v for k, v in answer.items() if k != "status"})
        assert answer["status"] in (200, 201), answer
        return Answer(execution_id=answer["id"])

    return Scene(bulk, holder, "work")


def _by_schedule(api, control: str) -> Scene:
    _job(api, control)
    holder = _holder(api)
    body = {"name": "every5", "cron": "*/5 * * * *", "workflowName": "job", "input": TENANT}
    assert api.post("schedules", body).status_code == 201

    def fire() -> Answer:
        clock.advance(300)
        assert fire_next_schedule() is True
        schedule = api.get("schedules/every5").json()
        if schedule["lastRefusal"]:
            refusal = {k: v for k, v in schedule["lastRefusal"].items() if k not in ("at", "scheduledFor")}
            return Answer(refusal=refusal)
        return Answer(execution_id=schedule["lastExecutionId"])

    return Scene(fire, holder, "work")


def _by_reopening(verb: str) -> Callable[[object, str], Scene]:
    def scene(api, control: str) -> Scene:
        _job(api, control)
        failed = _failed_job(api)
        holder = _holder(api)
        return Scene(lambda: _answer(api.post(f"executions/{failed}/{verb}", {})), holder, "work")

    return scene


def _by_failure_workflow(api, control: str) -> Scene:
    """``job`` fails and starts ``on_fail`` (one task on ``notify``), which
    is the controlled definition. The holder is an earlier ``on_fail`` run,
    or for the quota another root run (a run's end frees its own slot, so
    the quota is lowered under two running roots)."""
    register(api, "on_fail", simple("notify"), **_fields(control, FAILURE_KEY))
    _job(api, None, failureWorkflow="on_fail")
    if control == "quota":
        failing, other = start(api, "job", TENANT)["id"], start(api, "job", TENANT)["id"]
        leases = {lease["executionId"]: lease for lease in poll(api, "work", count=2)}
        assert api.put("quotas", {"maxConcurrentExecutions": 1}).status_code == 200
        to_fail, holder = leases[failing], leases[other]
    else:
        start(api, "job", TENANT)
        fail(api, poll_one(api, "work"), terminal=True)
        holder = poll_one(api, "notify")
        failing = start(api, "job", TENANT)["id"]
        to_fail = poll_one(api, "work")

    def fail_it() -> Answer:
        fail(api, to_fail, terminal=True)
        held = Execution.objects.get(idempotency_key=f"failure:{failing}:1")
        return Answer(execution_id=str(held.id))

    return Scene(fail_it, holder, "notify")


PATHS: dict[str, Callable[[object, str], Scene]] = {
    "start": _by_start,
    "bulk start": _by_bulk_start,
    "schedule firing": _by_schedule,
    "retry": _by_reopening("retry"),
    "restart": _by_reopening("restart"),
    "failure workflow": _by_failure_workflow,
}

REFUSALS = {
    "maxConcurrentExecutions": {
        "error": "LIMIT_EXCEEDED",
        "control": "maxConcurrentExecutions",
        "limit": 1,
        "current": 1,
    },
    "quota": {"error": "QUOTA_EXCEEDED", "quota": "maxConcurrentExecutions", "limit": 1, "current": 1},
}
# What a run that waits names in its blockedBy.
WAITS_ON = {
    "maxConcurrentExecutions": "maxConcurrentExecutions",
    "quota": "quota:maxConcurrentExecutions",
    "rateLimitConfig": "admission:acme",
}


def _waits(path: str, control: str) -> bool:
    return control == "rateLimitConfig" or path == "failure workflow"


def _world() -> tuple:
    """Every execution, task attempt, timer and admission ticket, as stored."""
    return tuple(sorted(map(repr, model.objects.values_list())) for model in (Execution, Task, Timer, Admission))


@pytest.mark.parametrize("control", CONTROLS)
@pytest.mark.parametrize("path", PATHS)
def test_each_start_control_holds_on_each_path(api, frozen_clock, path, control):
    scene = PATHS[path](api, control)
    before = _world()
    answer = scene.attempt()
    if _waits(path, control):
        assert answer.refusal is None
        view = execution(api, answer.execution_id)
        assert (view["status"], view["awaitingAdmission"]) == ("RUNNING", True)
        assert view["blockedBy"] == {
            "control": WAITS_ON[control],
            "limit": 1,
            "current": 1,
            "since": at(frozen_clock, view_offset(path)),
        }
        assert poll(api, scene.queue) == []  # nothing of it is leasable, nothing decided
    else:
        assert answer.execution_id is None
        assert {k: answer.refusal.get(k) for k in REFUSALS[control]} == REFUSALS[control]
        assert _world() == before  # the run keeps its ended state, its tasks and its timers

    complete(api, scene.holder)
    sweep()
    if answer.refusal is not None:
        answer = scene.attempt()
        assert answer.refusal is None, answer.refusal
    view = execution(api, answer.execution_id)
    assert (view["status"], view["awaitingAdmission"], view["blockedBy"]) == ("RUNNING", False, None)
    assert poll_one(api, scene.queue)["executionId"] == answer.execution_id


def view_offset(path: str) -> float:
    """Seconds into the test when the candidate took its place (a firing moves the clock)."""
    return 300 if path == "schedule firing" else 0


# --- retry and restart: the quota's other figure --------------------------------


@pytest.mark.parametrize("verb", ["retry", "restart"])
def test_retry_and_restart_count_against_max_executions_per_minute(api, frozen_clock, verb):
    _job(api, None)
    api.put("quotas", {"maxExecutionsPerMinute": 2})
    failed = _failed_job(api)
    start(api, "job", TENANT)
    before = _world()
    response = api.post(f"executions/{failed}/{verb}", {})
    assert response.status_code == 429
    assert {k: response.json()[k] for k in ("error", "quota", "limit", "current")} == {
        "error": "QUOTA_EXCEEDED",
        "quota": "maxExecutionsPerMinute",
        "limit": 2,
        "current": 2,
    }
    assert response["Retry-After"] == "60"
    assert _world() == before
    clock.advance(60)
    assert api.post(f"executions/{failed}/{verb}", {}).status_code == 200
    start(api, "job", TENANT)  # the retry spent one of the new minute's two
    assert api.post("executions", {"name": "job", "input": TENANT}).json()["quota"] == "maxExecutionsPerMinute"


def test_a_refused_retry_keeps_the_runs_timers(api, frozen_clock):
    _job(api, "maxConcurrentExecutions")
    failed = _failed_job(api)
    start(api, "job", TENANT)
    timers = list(Timer.objects.filter(execution_id=failed).values_list())
    view = execution(api, failed)
    assert api.post(f"executions/{failed}/retry", {}).status_code == 429
    assert list(Timer.objects.filter(execution_id=failed).values_list()) == timers
    assert execution(api, failed) == view


# --- a retry that waits for admission --------------------------------------------


def _retry_waiting(api) -> tuple[str, dict]:
    """A failed run retried while another holds its admission key's slot."""
    _job(api, "rateLimitConfig")
    failed = _failed_job(api)
    holder = _holder(api)
    view = api.post(f"executions/{failed}/retry", {}).json()
    assert view["awaitingAdmission"] is True
    assert task_at(view, "work")["status"] == "SCHEDULED" and task_at(view, "work")["attempt"] == 2
    return failed, holder


def test_a_waiting_retry_that_is_paused_stays_held_when_admitted(api):
    failed, holder = _retry_waiting(api)
    assert api.post(f"executions/{failed}/pause", {}).status_code == 200
    complete(api, holder)
    sweep()
    view = execution(api, failed)
    assert (view["status"], view["awaitingAdmission"]) == ("PAUSED", False)
    assert poll(api, "work") == []
    assert api.post(f"executions/{failed}/resume", {}).status_code == 200
    assert poll_one(api, "work")["executionId"] == failed


def test_a_waiting_retry_resumed_before_admission_stays_held(api):
    failed, _holder = _retry_waiting(api)
    assert api.post(f"executions/{failed}/pause", {}).status_code == 200
    assert api.post(f"executions/{failed}/resume", {}).status_code == 200
    assert execution(api, failed)["awaitingAdmission"] is True
    assert poll(api, "work") == []


def test_a_waiting_restart_is_decided_when_admitted(api, frozen_clock):
    _job(api, "rateLimitConfig")
    failed = _failed_job(api)
    holder = _holder(api)
    view = api.post(f"executions/{failed}/restart", {}).json()
    assert (view["run"], view["awaitingAdmission"], view["tasks"], view["deadline"]) == (2, True, [], None)
    clock.advance(10)
    complete(api, holder)
    sweep()
    view = execution(api, failed)
    assert view["awaitingAdmission"] is False and view["deadline"] == at(frozen_clock, 10 + 3600)
    assert [t["status"] for t in view["tasks"]] == ["SCHEDULED"]


# --- SUB_WORKFLOW children --------------------------------------------------------------


def _parent(api, **child_fields) -> None:
    no_retries(api, "inner", "call")
    register(api, "child", simple("inner"), **child_fields)
    register(
        api,
        "parent",
        {"name": "call", "taskReferenceName": "sub", "type": "SUB_WORKFLOW", "subWorkflowParam": {"name": "child"}},
    )


def test_children_run_under_their_roots_admission_and_do_not_count(api):
    _parent(
        api,
        maxConcurrentExecutions=1,
        rateLimitConfig={"rateLimitKey": "${workflow.input.tenant}", "concurrentExecLimit": 1},
    )
    api.put("quotas", {"maxConcurrentExecutions": 2})
    parents = [start(api, "parent") for _ in range(2)]
    children = [execution(api, task_at(p, "sub")["subWorkflowId"]) for p in parents]
    assert [(c["status"], c["awaitingAdmission"], c["blockedBy"]) for c in children] == [("RUNNING", False, None)] * 2
    assert len(poll(api, "inner", count=10)) == 2
    # Two roots and two children run; only the roots count.
    refusal = api.post("executions", {"name": "parent"}).json()
    assert (refusal["quota"], refusal["current"]) == ("maxConcurrentExecutions", 2)
    assert Admission.objects.count() == 0


def test_retrying_a_child_takes_no_admission_and_its_root_does(api):
    _parent(api)
    parent = start(api, "parent")
    child_id = task_at(parent, "sub")["subWorkflowId"]
    fail(api, poll_one(api, "inner"), terminal=True)
    sweep()
    assert execution(api, parent["id"])["status"] == "FAILED"
    api.put("quotas", {"maxConcurrentExecutions": 1})
    start(api, "parent")
    assert api.post(f"executions/{parent['id']}/retry", {}).status_code == 429
    view = api.post(f"executions/{child_id}/retry", {}).json()
    assert (view["status"], view["awaitingAdmission"]) == ("RUNNING", False)


def test_a_childs_failure_workflow_waits_for_a_slot_its_root_holds(api, frozen_clock):
    register(api, "on_fail", simple("notify"))
    _parent(api, failureWorkflow="on_fail")
    api.put("quotas", {"maxConcurrentExecutions": 1})
    parent = start(api, "parent")
    fail(api, poll_one(api, "inner"), terminal=True)
    held = Execution.objects.get(name="on_fail")
    view = execution(api, str(held.id))
    assert view["blockedBy"] == {
        "control": "quota:maxConcurrentExecutions",
        "limit": 1,
        "current": 1,
        "since": at(frozen_clock),
    }
    sweep()  # the parent fails with its child, and its slot goes to the failure workflow
    assert execution(api, parent["id"])["status"] == "FAILED"
    assert execution(api, str(held.id))["awaitingAdmission"] is False
    assert poll_one(api, "notify")["executionId"] == str(held.id)


# --- the line of held starts ----------------------------------------------------------


def _failing_runs(api, count: int) -> list[str]:
    """``count`` runs of ``job`` failed, each starting ``on_fail``; the ids of those."""
    ids = []
    for _ in range(count):
        failing = start(api, "job", TENANT)["id"]
        fail(api, poll_one(api, "work"), terminal=True)
        ids.append(str(Execution.objects.get(idempotency_key=f"failure:{failing}:1").id))
    return ids


def test_held_failure_workflows_are_admitted_in_order(api):
    register(api, "on_fail", simple("notify"), maxConcurrentExecutions=1)
    _job(api, None, failureWorkflow="on_fail")
    first, second, third = _failing_runs(api, 3)
    assert [execution(api, pk)["awaitingAdmission"] for pk in (first, second, third)] == [False, True, True]
    assert execution(api, third)["blockedBy"]["current"] == 1
    for running, waiting in ((first, [second, third]), (second, [third]), (third, [])):
        leased = poll_one(api, "notify")
        assert leased["executionId"] == running
        complete(api, leased)
        sweep()
        if waiting:
            assert [execution(api, pk)["awaitingAdmission"] for pk in waiting] == [False] + [True] * (len(waiting) - 1)
    assert not Admission.objects.exists()


def test_a_held_failure_workflow_that_is_terminated_leaves_the_line(api):
    register(api, "on_fail", simple("notify"), maxConcurrentExecutions=1)
    _job(api, None, failureWorkflow="on_fail")
    _first, second, third = _failing_runs(api, 3)
    assert api.post(f"executions/{second}/terminate", {}).status_code == 200
    assert Admission.objects.filter(bucket=HELD_LINE).count() == 1
    complete(api, poll_one(api, "notify"))
    sweep()
    assert execution(api, third)["awaitingAdmission"] is False
    assert poll_one(api, "notify")["executionId"] == third


@pytest.mark.parametrize("sweeper", [lambda: SweeperRole().tick(), celery_sweep], ids=["role", "celery"])
def test_the_sweeper_admits_what_time_frees(api, frozen_clock, sweeper):
    """maxExecutionsPerMinute frees with the window, not with an end; a held
    failure workflow then lines up in its admission bucket like a start."""
    register(api, "on_fail", simple("notify"), rateLimitConfig={"rateLimitKey": FAILURE_KEY, "concurrentExecLimit": 1})
    _job(api, None, failureWorkflow="on_fail")
    api.put("quotas", {"maxExecutionsPerMinute": 3})
    first, second = start(api, "job", TENANT)["id"], start(api, "job", TENANT)["id"]
    leases = {lease["executionId"]: lease for lease in poll(api, "work", count=2)}
    fail(api, leases[first], terminal=True)  # its failure workflow is the minute's third start
    clock.advance(15)
    fail(api, leases[second], terminal=True)
    held = str(Execution.objects.get(idempotency_key=f"failure:{second}:1").id)
    assert execution(api, held)["blockedBy"] == {
        "control": "quota:maxExecutionsPerMinute",
        "limit": 3,
        "current": 3,
        "since": at(frozen_clock, 15),
        "until": at(frozen_clock, 60),
    }
    sweeper()
    assert execution(api, held)["awaitingAdmission"] is True  # the minute is not over
    clock.advance(45)
    sweeper()
    view = execution(api, held)
    assert view["awaitingAdmission"] is True and view["blockedBy"]["control"] == "admission:acme"
    complete(api, poll_one(api, "notify"))
    sweep()
    assert execution(api, held)["awaitingAdmission"] is False
    assert poll_one(api, "notify")["executionId"] == held


def test_with_nothing_held_the_sweep_is_one_query(api, django_assert_num_queries):
    from quotas import starts

    with django_assert_num_queries(1):
        assert starts.sweep_held() is False
