"""Conductor's own published workflow definitions (tests/conductor_corpus/,
each file as conductor-oss/conductor ships it in test-harness/src/test/resources/
or docs/) registered as shipped on Node Flow's own route, and a sample of
them run to COMPLETED with workers, system tasks and the API completing
waits (docs/conductor.md)."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.engine_helpers import WORKFLOWS, complete, execution, poll, start, sweep
from tests.system_helpers import run_system_tasks

CORPUS_DIR = pathlib.Path(__file__).parent / "conductor_corpus"
CORPUS = sorted(CORPUS_DIR.glob("*.json"))
# What a definition needs registered first (the corpus ships it elsewhere).
NEEDS = {"kitchensink.json": [{"name": "sub_flow_1", "tasks": [{"name": "sub_task", "taskReferenceName": "sub_task"}]}]}


def load(name: str) -> dict:
    return json.loads((CORPUS_DIR / name).read_text())


def register_shipped(api, name: str) -> Any:
    for needed in NEEDS.get(name, []):
        assert api.post(WORKFLOWS, needed).status_code == 201
    return api.post(WORKFLOWS, load(name))


def test_the_corpus_holds_conductors_definitions():
    assert 20 <= len(CORPUS) <= 40
    assert all("tasks" in json.loads(path.read_text()) for path in CORPUS)


@pytest.mark.parametrize("path", CORPUS, ids=lambda path: path.stem)
def test_it_registers_each_definition_as_shipped(api, path):
    response = register_shipped(api, path.name)
    assert response.status_code == 201, response.json()
    got = api.get(f"{WORKFLOWS}/{response.json()['name']}").json()
    shipped = load(path.name)
    assert got["tasks"] == shipped["tasks"]  # answered as posted
    for key in ("schemaVersion", "ownerEmail"):
        if key in shipped:
            assert got[key] == shipped[key]


# --- running a sample ---------------------------------------------------------------------


def _tasks(value: Any) -> Iterator[dict]:
    if isinstance(value, dict):
        if "taskReferenceName" in value:
            yield value
        for item in value.values():
            yield from _tasks(item)
    elif isinstance(value, list):
        for item in value:
            yield from _tasks(item)


def worker_queues(definition: dict) -> set[str]:
    return {t["name"] for t in _tasks(definition["tasks"]) if t.get("type", "SIMPLE") == "SIMPLE" and "name" in t}


def drive(api, developer, execution_id: str, queues: set[str], outputs: dict[str, dict]) -> dict:
    """Play every worker and the system-task role, and complete every WAIT
    through the API, until the run ends (or nothing moves)."""
    view = execution(api, execution_id)
    for _ in range(40):
        if view["status"] != "RUNNING":
            break
        run_system_tasks()
        for queue in sorted(queues):
            for leased in poll(api, queue, count=20):
                complete(api, leased, outputs.get(queue, {}))
        for waiting in execution(api, execution_id)["tasks"]:
            if waiting["type"] == "WAIT" and waiting["status"] == "IN_PROGRESS":
                answer = developer.post(f"tasks/{waiting['taskId']}/result", {"status": "COMPLETED"})
                assert answer.status_code == 200, answer.json()
        sweep()
        view = execution(api, execution_id)
    return view


DYNAMIC_TASKS = {
    "dynamicTasks": [
        {"name": "integration_task_2", "taskReferenceName": "xdt1"},
        {"name": "integration_task_3", "taskReferenceName": "xdt2"},
    ],
    "dynamicTasksInput": {"xdt1": {"k1": "v1"}, "xdt2": {"k2": "v2"}},
}
SAMPLES = [
    ("decision_and_terminate_integration_test.json", {"case": "one", "param1": "p1", "param2": "p2"}, {}),
    ("exclusive_join_integration_test.json", {"payload": 1, "decision_1": True, "decision_2": True}, {}),
    ("exclusive_join_integration_test.json", {"payload": 1, "decision_1": False, "decision_3": False}, {}),
    ("do_while_integration_test.json", {"loop": 2}, {}),
    ("do_while_system_tasks.json", {"loop": 2}, {}),
    ("do_while_five_loop_over_integration_test.json", {"loop": 3}, {}),
    ("do_while_list_iteration_integration_test.json", {"items": [1, 2, 3]}, {}),
    ("do_while_iteration_fix_test.json", {"loop": 2}, {}),
    ("do_while_set_variable_fix.json", {}, {}),
    ("dynamic_fork_join_integration_test.json", {"param1": "a", "param2": "b"}, {"integration_task_1": DYNAMIC_TASKS}),
    ("set_variable_workflow_integration_test.json", {"var": 5}, {}),
    ("simple_json_jq_transform_integration_test.json", {"in1": {"array": [1]}, "in2": {"array": [2]}}, {}),
    ("sequential_json_jq_transform_integration_test.json", {"body": {"x": 1}}, {}),
    ("json_jq_transform_result_integration_test.json", {"requestedAction": "redeliver"}, {}),
    ("fork_join_integration_test.json", {"param1": "a", "param2": "b"}, {}),
    ("decision_and_fork_join_integration_test.json", {"case": "c"}, {}),
    ("simple_decision_task_integration_test.json", {"case": "c"}, {}),
    (
        "conditional_switch_task_workflow_integration_test.json",
        {"param1": "nested", "param2": "one", "finalCase": "notify"},
        {},
    ),
    ("failure_workflow_for_terminate_task_workflow.json", {"a": 1}, {}),
    ("wait_for_approval_workflow.json", {"orderId": "o-1"}, {}),
    ("fork_join_sync_mode_integration_test.json", {"param1": "a"}, {}),
]
EXTRA_QUEUES = {"dynamic_fork_join_integration_test.json": {"integration_task_2", "integration_task_3"}}


@pytest.mark.parametrize(
    ("name", "workflow_input", "outputs"),
    SAMPLES,
    ids=[f"{name.removesuffix('.json')}-{index}" for index, (name, _, _) in enumerate(SAMPLES)],
)
def test_a_sample_runs_to_completion(api, api_for, name, workflow_input, outputs):
    registered = register_shipped(api, name)
    assert registered.status_code == 201, registered.json()
    definition = load(name)
    run = start(api, registered.json()["name"], workflow_input)
    queues = worker_queues(definition) | EXTRA_QUEUES.get(name, set())
    view = drive(api, api_for("developer"), run["id"], queues, outputs)
    assert view["status"] == "COMPLETED", (
        view["reasonForIncompletion"],
        [(t["path"], t["status"]) for t in view["tasks"]],
    )


def test_the_loop_over_items_sample_processes_each_item(api, api_for):
    registered = register_shipped(api, "do_while_list_iteration_integration_test.json")
    run = start(api, registered.json()["name"], {"items": ["x", "y"]})
    view = drive(api, api_for("developer"), run["id"], set(), {})
    results = [t["outputData"]["result"] for t in view["tasks"] if t["referenceTaskName"] == "process_item"]
    assert results == [{"processedItem": "x", "index": 0}, {"processedItem": "y", "index": 1}]
