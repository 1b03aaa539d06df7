"""A client generated from the live schema works with no hand edits (issue 19.2).

A server (``manage.py nodeflow_run``) runs in a subprocess on loopback, on
a port of its own (18300-18399) and the test database; its schema is
fetched from ``/api/schema/``, ``openapi-python-client`` (pinned in
requirements.txt) generates a client package from it, and the README's
walk-through is driven through that package alone, with its models:
a task definition, a workflow definition, a start, a poll, a result, the
next task leased with the result, and the execution read back COMPLETED.

The generated package is cached under ``var/generated-client/``, keyed by
the schema, the generator's version and its configuration: a run whose
schema did not change imports the package it generated before.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from nodeflow.keys import create_api_key
from tests.procs.stack import PYTHON, ROOT, live_database_url

PORTS = range(18300, 18400)
PACKAGE = "nodeflow_generated_client"
CACHE = ROOT / "var" / "generated-client"
# No post hooks: the generator's default runs ruff over the package, which
# changes nothing a test imports and costs a second.
CONFIG = {"project_name_override": "nodeflow-generated-client", "package_name_override": PACKAGE, "post_hooks": []}


def _free_port() -> int:
    for port in PORTS:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {PORTS.start}-{PORTS.stop - 1}")


@pytest.fixture
def server(transactional_db) -> Iterator[tuple[str, str]]:
    """(base URL, admin key) of a server of its own on the test database."""
    key = create_api_key(role="admin", namespace="default")[1]
    port = _free_port()
    env = {**os.environ, "DATABASE_URL": live_database_url(), "LOG_LEVEL": "WARNING"}
    env.pop("CONN_MAX_AGE", None)
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [PYTHON, "manage.py", "nodeflow_run", "--addr", f"127.0.0.1:{port}", "--threads", "4"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_until_up(url, process, log)
            yield url, key
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_until_up(url: str, process: subprocess.Popen, log) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            raise AssertionError(f"the server exited {process.returncode}: {log.read().decode()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise AssertionError("the server did not answer /healthz within 60 s")


def generated_client(schema: bytes) -> ModuleType:
    """The package openapi-python-client generates from ``schema``, imported
    (generated once per schema, generator version and configuration)."""
    generator = version("openapi-python-client")
    digest = hashlib.sha256(schema + generator.encode() + json.dumps(CONFIG, sort_keys=True).encode()).hexdigest()
    home = CACHE / digest[:16]
    if not (home / PACKAGE / "__init__.py").exists():
        _generate(schema, home)
    sys.path.insert(0, str(home))
    try:
        for name in [name for name in sys.modules if name == PACKAGE or name.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]  # another schema's package, imported earlier in this process
        return importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(home))


def _generate(schema: bytes, home: Path) -> None:
    CACHE.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=CACHE, prefix="work-"))
    try:
        (work / "openapi.json").write_bytes(schema)
        (work / "config.json").write_text(json.dumps(CONFIG))
        done = subprocess.run(
            [
                str(Path(PYTHON).parent / "openapi-python-client"),
                "generate",
                "--path",
                str(work / "openapi.json"),
                "--config",
                str(work / "config.json"),
                "--meta",
                "none",
                "--output-path",
                str(work / "out" / PACKAGE),
            ],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "Error" not in done.stdout, done.stdout[-3000:]  # its parse errors are printed, not raised
        try:
            (work / "out").rename(home)  # whole or not at all: a concurrent run sees it complete or absent
        except OSError:
            if not (home / PACKAGE / "__init__.py").exists():
                raise  # not a concurrent run's rename that won
        for stale in CACHE.iterdir():  # packages of earlier schemas
            if stale != home and not stale.name.startswith("work-"):
                shutil.rmtree(stale, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_a_client_generated_from_the_live_schema_drives_the_walk_through(server):
    url, key = server
    schema = httpx.get(f"{url}/api/schema/?format=json", timeout=30)
    assert schema.status_code == 200
    nf = generated_client(schema.content)
    # The generated package, just imported: its modules by name.
    from nodeflow_generated_client.api.controls import list_queues
    from nodeflow_generated_client.api.definitions import (
        get_task_definition,
        list_workflow_definitions,
        register_task_definition,
        register_workflow_definition,
    )
    from nodeflow_generated_client.api.executions import get_execution, start_execution
    from nodeflow_generated_client.api.workers import heartbeat_task, poll_tasks, report_task_result
    from nodeflow_generated_client.models import (
        Error,
        ExecutionStatus,
        HeartbeatRequest,
        NextRequest,
        PollRequest,
        ResultRequest,
        ResultRequestOutputData,
        ResultStatus,
        RetryLogic,
        StartExecutionRequest,
        StartExecutionRequestInput,
        TaskDefinitionRequest,
        TaskStatus,
        WorkflowDefinitionRequest,
        WorkflowTaskRequest,
        WorkflowTaskRequestInputParameters,
    )

    client = nf.AuthenticatedClient(base_url=url, token=key, prefix="", auth_header_name="x-api-key")
    ns = "default"
    with client:
        # A task definition: the retry policy of the README.
        created = register_task_definition.sync_detailed(
            ns,
            client=client,
            body=TaskDefinitionRequest(
                name="charge",
                retry_count=5,
                retry_logic=RetryLogic.EXPONENTIAL_BACKOFF,
                retry_delay_seconds=2,
                backoff_scale_factor=2,
                max_retry_delay_seconds=300,
                jitter=0.2,
                retry_budget=0.3,
                non_retryable_errors=["card_declined", "INVALID_ARGUMENT"],
            ),
        )
        assert created.status_code == 201, created.content
        charge = get_task_definition.sync(ns, "charge", client=client)
        assert charge.retry_count == 5 and charge.retry_logic is RetryLogic.EXPONENTIAL_BACKOFF, charge
        refused = register_task_definition.sync(
            ns, client=client, body=TaskDefinitionRequest(name="x", retry_count=101)
        )
        assert isinstance(refused, Error) and refused.field == "retryCount", refused

        # The checkout workflow: charge, then an optional notify.
        workflow = register_workflow_definition.sync(
            ns,
            client=client,
            body=WorkflowDefinitionRequest(
                name="checkout",
                tasks=[
                    WorkflowTaskRequest(
                        name="charge",
                        task_reference_name="charge",
                        input_parameters=WorkflowTaskRequestInputParameters.from_dict(
                            {"amount": "${workflow.input.amount}"}
                        ),
                    ),
                    WorkflowTaskRequest(
                        name="notify",
                        task_reference_name="notify",
                        optional=True,
                        retry_count=1,
                        input_parameters=WorkflowTaskRequestInputParameters.from_dict(
                            {"chargeId": "${charge.output.id}"}
                        ),
                    ),
                ],
            ),
        )
        assert workflow.version == 1 and workflow.published, workflow
        listed = list_workflow_definitions.sync(ns, client=client)
        assert [definition.name for definition in listed] == ["checkout"]

        # Start, as the README does, with an idempotency key.
        start = StartExecutionRequest(
            name="checkout", input_=StartExecutionRequestInput.from_dict({"amount": 42}), idempotency_key="order-1001"
        )
        started = start_execution.sync_detailed(ns, client=client, body=start)
        assert started.status_code == 201, started.content
        execution = started.parsed
        assert execution.status is ExecutionStatus.RUNNING
        assert start_execution.sync(ns, client=client, body=start).id == execution.id

        # Play the worker: a poll with the generated defaults (no workerId
        # given: the schema's default was once "", which the server refuses).
        assert poll_tasks.sync(ns, "notify", client=client, body=PollRequest()) == []
        leased = poll_tasks.sync(ns, "charge", client=client, body=PollRequest(worker_id="w1", count=10))
        assert [task.execution_id for task in leased] == [execution.id], leased
        task = leased[0]
        assert task.input_data.to_dict() == {"amount": 42} and task.attempt == 1
        beat = heartbeat_task.sync(
            ns, str(task.task_id), client=client, body=HeartbeatRequest(lease_token=task.lease_token)
        )
        assert beat.status is TaskStatus.IN_PROGRESS and beat.lease_expires_at >= task.lease_expires_at, beat
        (queue,) = list_queues.sync(ns, client=client)
        assert (queue.task_type, queue.depth, queue.in_flight) == ("charge", 0, 1), queue
        reported = report_task_result.sync(
            ns,
            str(task.task_id),
            client=client,
            body=ResultRequest(
                lease_token=task.lease_token,
                status=ResultStatus.COMPLETED,
                output_data=ResultRequestOutputData.from_dict({"id": "ch_1"}),
                next_=NextRequest(worker_id="w1", count=1, task_type="notify"),
            ),
        )
        assert reported.status is TaskStatus.COMPLETED, reported
        (notify,) = reported.next_
        assert notify.input_data.to_dict() == {"chargeId": "ch_1"}
        done = report_task_result.sync(
            ns,
            str(notify.task_id),
            client=client,
            body=ResultRequest(lease_token=notify.lease_token, status=ResultStatus.COMPLETED),
        )
        assert done.status is TaskStatus.COMPLETED, done

        # Read it back: COMPLETED, every task typed.
        final = get_execution.sync(ns, str(execution.id), client=client)
        assert final.status is ExecutionStatus.COMPLETED, final
        assert [(t.reference_task_name, t.status) for t in final.tasks] == [
            ("charge", TaskStatus.COMPLETED),
            ("notify", TaskStatus.COMPLETED),
        ]
        assert final.idempotency_key == "order-1001" and final.blocked_by is None
