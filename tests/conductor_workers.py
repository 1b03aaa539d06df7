"""conductor-python, unchanged, against a live Node Flow: run as a script by
tests/test_conductor_python_workers.py (``NF_API_URL``, the key pairs in
``NF_WORKER_KEY_ID``/``NF_WORKER_KEY_SECRET`` and ``NF_CLIENT_KEY_ID``/
``NF_CLIENT_KEY_SECRET``).

Its clients register the definitions and start the workflows; its workers
(``@worker_task`` under ``TaskHandler``) run them; when every workflow has
ended, or ``NF_DEADLINE_S`` has passed, the workers stop and the last stdout
line is each workflow as its client read it, as JSON. Nothing here knows it
talks to Node Flow but the URL and the keys.
"""

# No ``from __future__ import annotations``: conductor-python reads each
# worker parameter's annotation as a type to convert its input with.
import json
import os
import sys
import time

from conductor.client.automator.task_handler import TaskHandler
from conductor.client.configuration.configuration import Configuration
from conductor.client.configuration.settings.authentication_settings import AuthenticationSettings
from conductor.client.context.task_context import TaskInProgress, get_task_context
from conductor.client.http.models.start_workflow_request import StartWorkflowRequest
from conductor.client.http.models.task_def import TaskDef
from conductor.client.http.models.task_result import TaskResult
from conductor.client.http.models.workflow_def import WorkflowDef
from conductor.client.http.models.workflow_task import WorkflowTask
from conductor.client.orkes.orkes_metadata_client import OrkesMetadataClient
from conductor.client.orkes.orkes_task_client import OrkesTaskClient
from conductor.client.orkes.orkes_workflow_client import OrkesWorkflowClient
from conductor.client.worker.exception import NonRetryableException
from conductor.client.worker.worker_task import worker_task

# The long task runs past its lease (responseTimeoutSeconds), which only lease
# extension keeps alive: conductor-python extends at 80% of the
# responseTimeoutSeconds a poll answers, checking every second.
LEASE_S = 7
SLOW_S = 9.0
ENDED = {"COMPLETED", "FAILED", "TIMED_OUT", "TERMINATED"}

# Definitions as conductor-python's own models write them (TaskDef,
# WorkflowDef, WorkflowTask: Conductor's field names, its defaults such as
# enforceSchema, a DECISION by caseValueParam).
TASK_DEFS = [
    TaskDef(name="cp_enrich", retry_count=0, owner_email="ops@example.com"),
    TaskDef(name="cp_flaky", retry_count=2, retry_logic="FIXED", retry_delay_seconds=0),
    TaskDef(name="cp_finish", retry_count=0),
    TaskDef(name="cp_reject", retry_count=3, retry_logic="FIXED", retry_delay_seconds=0),
    TaskDef(name="cp_slow", retry_count=0, response_timeout_seconds=LEASE_S),
]
ORDER = WorkflowDef(
    name="cp_order",
    version=1,
    description="a fork, a decision, a retried task and a terminal failure",
    owner_email="ops@example.com",
    schema_version=2,
    tasks=[
        WorkflowTask(
            name="fork",
            task_reference_name="fork",
            type="FORK_JOIN",
            fork_tasks=[
                [
                    WorkflowTask(
                        name="cp_enrich",
                        task_reference_name="enrich",
                        input_parameters={"order": "${workflow.input.order}"},
                    )
                ],
                [WorkflowTask(name="cp_flaky", task_reference_name="flaky")],
            ],
        ),
        WorkflowTask(name="join", task_reference_name="join", type="JOIN", join_on=["enrich", "flaky"]),
        WorkflowTask(
            name="route",
            task_reference_name="route",
            type="DECISION",
            case_value_param="route",
            input_parameters={"route": "${workflow.input.route}"},
            decision_cases={"refuse": [WorkflowTask(name="cp_reject", task_reference_name="reject")]},
            default_case=[
                WorkflowTask(
                    name="cp_finish",
                    task_reference_name="finish",
                    input_parameters={"enriched": "${enrich.output.enriched}"},
                )
            ],
        ),
    ],
    output_parameters={"shipped": "${finish.output.shipped}", "charged": "${flaky.output.charged}"},
)
SLOW = WorkflowDef(name="cp_slow_flow", version=1, tasks=[WorkflowTask(name="cp_slow", task_reference_name="slow")])
# No worker serves cp_nobody: this one is only steered by the client.
STEERED = WorkflowDef(name="cp_steered", version=1, tasks=[WorkflowTask(name="cp_nobody", task_reference_name="idle")])
# A WAIT with no duration: the client completes it with a task update.
APPROVAL = WorkflowDef(
    name="cp_approval",
    version=1,
    tasks=[WorkflowTask(name="approval", task_reference_name="approval", type="WAIT")],
    output_parameters={"by": "${approval.output.by}"},
)


@worker_task(task_definition_name="cp_enrich")
def enrich(order: str) -> dict:
    return {"enriched": f"order {order}"}


@worker_task(task_definition_name="cp_flaky")
def flaky() -> dict:
    if get_task_context().get_retry_count() == 0:
        raise RuntimeError("the payment gateway timed out")  # FAILED: retried
    return {"charged": True}


@worker_task(task_definition_name="cp_finish")
def finish(enriched: str) -> dict:
    return {"shipped": enriched}


@worker_task(task_definition_name="cp_reject")
def reject() -> dict:
    raise NonRetryableException("card declined")  # FAILED_WITH_TERMINAL_ERROR: never retried


@worker_task(task_definition_name="cp_slow", lease_extend_enabled=True)
def slow() -> dict | TaskInProgress:
    if get_task_context().get_poll_count() <= 1:
        return TaskInProgress(callback_after_seconds=1, output={"phase": "called back"})
    time.sleep(SLOW_S)
    return {"phase": "done"}


def configuration(role: str) -> Configuration:
    keys = AuthenticationSettings(
        key_id=os.environ[f"NF_{role}_KEY_ID"], key_secret=os.environ[f"NF_{role}_KEY_SECRET"]
    )
    return Configuration(server_api_url=os.environ["NF_API_URL"], authentication_settings=keys)


def summary(workflow) -> dict:
    return {
        "status": workflow.status,
        "output": workflow.output,
        "reasonForIncompletion": workflow.reason_for_incompletion,
        "tasks": [[t.reference_task_name, t.status, t.retry_count, t.task_id] for t in workflow.tasks or []],
    }


def steer(workflows: OrkesWorkflowClient) -> dict:
    """Every control of the workflow client, on a workflow no worker serves."""
    request = StartWorkflowRequest(name="cp_steered", input={}, correlation_id="steer-1")
    workflow_id = workflows.start_workflow(request)
    statuses = []
    for control in (
        workflows.pause_workflow,
        workflows.resume_workflow,
        lambda wid: workflows.terminate_workflow(wid, reason="steered away"),
        workflows.retry_workflow,
        workflows.terminate_workflow,
        workflows.restart_workflow,
    ):
        control(workflow_id)
        statuses.append(workflows.get_workflow(workflow_id, include_tasks=False).status)
    found = workflows.get_by_correlation_ids("cp_steered", ["steer-1"], include_completed=True)
    workflows.terminate_workflow(workflow_id, reason="done")
    return {"statuses": statuses, "correlated": [w.workflow_id for w in found["steer-1"]], "workflowId": workflow_id}


def approve(workflows: OrkesWorkflowClient, tasks: OrkesTaskClient) -> dict:
    """A WAIT with no duration, completed by the client's task update."""
    workflow_id = workflows.start_workflow(StartWorkflowRequest(name="cp_approval", input={}))
    [waiting] = workflows.get_workflow(workflow_id, include_tasks=True).tasks
    result = TaskResult(
        task_id=waiting.task_id, workflow_instance_id=workflow_id, status="COMPLETED", output_data={"by": "ann"}
    )
    answer = tasks.update_task(result)
    workflow = workflows.get_workflow(workflow_id, include_tasks=True)
    return {"answer": answer, "taskId": waiting.task_id, **summary(workflow)}


def main() -> None:
    client = configuration("CLIENT")
    metadata = OrkesMetadataClient(client)
    for task_def in TASK_DEFS:
        metadata.register_task_def(task_def)
    for definition in (ORDER, SLOW, STEERED, APPROVAL):
        metadata.register_workflow_def(definition, overwrite=True)
    workflows = OrkesWorkflowClient(client)
    started = {
        "shipped": workflows.start_workflow(
            StartWorkflowRequest(name="cp_order", input={"order": "A1", "route": "ship"})
        ),
        "refused": workflows.start_workflow(
            StartWorkflowRequest(name="cp_order", input={"order": "B2", "route": "refuse"})
        ),
        "slow": workflows.start_workflow(StartWorkflowRequest(name="cp_slow_flow", input={})),
    }
    handler = TaskHandler(configuration=configuration("WORKER"), scan_for_annotated_workers=True)
    handler.start_processes()
    deadline = time.monotonic() + float(os.environ.get("NF_DEADLINE_S", "60"))
    try:
        while True:
            seen = {
                name: workflows.get_workflow(workflow_id, include_tasks=True) for name, workflow_id in started.items()
            }
            if all(w.status in ENDED for w in seen.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        handler.stop_processes()
    ended = {name: {"workflowId": started[name], **summary(w)} for name, w in seen.items()}
    print(json.dumps({**ended, "steered": steer(workflows), "approved": approve(workflows, OrkesTaskClient(client))}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
