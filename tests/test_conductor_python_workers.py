"""conductor-python workers run unchanged against Node Flow (issue 18.4).

A live server (``manage.py nodeflow_run``, every role) runs in a subprocess
on loopback; conductor-python (pinned in requirements.txt) runs in another
(tests/conductor_workers.py): its clients register the definitions and
start the workflows through the Conductor-compatible routes with a
developer key pair, its ``@worker_task`` workers under ``TaskHandler`` work
them with a worker key pair. The workflows end as they would on Conductor:

- a fork whose branches both complete, one after a retry (an exception is a
  retryable failure), a DECISION, and the workflow COMPLETED with its output;
- the same workflow down the other case, where ``NonRetryableException``
  fails the task terminally (not retried, though its policy allows 3) and
  the workflow FAILED;
- a task that first answers ``TaskInProgress`` (called back a second later,
  the same attempt polled again) and then runs past its lease, kept alive
  by conductor-python's lease extension: one attempt, COMPLETED.

The definitions are conductor-python's own models (TaskDef, WorkflowDef,
WorkflowTask), as a Conductor user writes them. Its workflow client steers
a fourth workflow through pause, resume, terminate, retry and restart and
finds it by correlation id, and its task client completes a WAIT with no
duration.

It waits on real progress, with a deadline: about 15 s of wall time.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest

from executions.models import Task
from nodeflow.keys import create_api_key
from tests.procs.stack import PYTHON, ROOT, free_port, inherited_env, live_database_url

# conductor-python's top-level package is ``conductor`` (Node Flow's app is
# ``conductor_api``, so nothing shadows it); its workers run in a process of
# their own, as a Conductor user's would.
WORKERS = ROOT / "tests" / "conductor_workers.py"
LEASE_S = 7  # cp_slow's responseTimeoutSeconds in tests/conductor_workers.py
SERVER_START_S = 30
WORKERS_DEADLINE_S = 60


@pytest.fixture
def server(transactional_db) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "DATABASE_URL": live_database_url(), "PGAPPNAME": "nodeflow-conductor-python-test"}
    env.pop("CONN_MAX_AGE", None)
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            [PYTHON, "manage.py", "nodeflow_run", "--addr", f"127.0.0.1:{port}", "--threads", "8"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            _wait_until_up(port, process, log)
            yield f"http://127.0.0.1:{port}/v1/ns/default/api"
        finally:
            process.terminate()
            process.wait(timeout=15)


def _wait_until_up(port: int, process: subprocess.Popen, log) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline and process.poll() is None:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.1)
    log.seek(0)
    pytest.fail(f"the server did not come up:\n{log.read()[-5000:]}")


def _key_pair(role: str) -> dict[str, str]:
    key, secret = create_api_key(role=role, namespace="default")
    return {"ID": str(key.pk), "SECRET": secret}


@pytest.fixture
def conductor_run(server) -> dict:
    env = inherited_env()
    env.update(NF_API_URL=server, NF_DEADLINE_S=str(WORKERS_DEADLINE_S))
    for role, name in (("worker", "WORKER"), ("developer", "CLIENT")):
        pair = _key_pair(role)
        env.update({f"NF_{name}_KEY_ID": pair["ID"], f"NF_{name}_KEY_SECRET": pair["SECRET"]})
    done = subprocess.run(
        [PYTHON, str(WORKERS)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=WORKERS_DEADLINE_S + 60
    )
    assert done.returncode == 0, done.stderr[-5000:]
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-5000:]
    return {"workflows": json.loads(lines[-1]), "stderr": done.stderr}


def _attempts(workflow: dict, ref: str) -> list[tuple[str, int]]:
    return [(status, retries) for name, status, retries, _ in workflow["tasks"] if name == ref]


def test_conductor_python_workers_run_unchanged(conductor_run):
    workflows, log = conductor_run["workflows"], conductor_run["stderr"][-5000:]

    shipped = workflows["shipped"]
    assert shipped["status"] == "COMPLETED", (shipped, log)
    assert shipped["output"] == {"shipped": "order A1", "charged": True}
    assert _attempts(shipped, "flaky") == [("FAILED", 0), ("COMPLETED", 1)]  # an exception: retried
    assert _attempts(shipped, "enrich") == [("COMPLETED", 0)]
    assert _attempts(shipped, "finish") == [("COMPLETED", 0)]
    assert _attempts(shipped, "reject") == []

    refused = workflows["refused"]
    assert refused["status"] == "FAILED", (refused, log)
    assert "card declined" in refused["reasonForIncompletion"]
    # NonRetryableException: FAILED_WITH_TERMINAL_ERROR, one attempt though the policy allows 3 retries.
    assert _attempts(refused, "reject") == [("FAILED_WITH_TERMINAL_ERROR", 0)]
    assert _attempts(refused, "finish") == []

    slow = workflows["slow"]
    assert slow["status"] == "COMPLETED", (slow, log)
    [(_, status, retries, task_id)] = slow["tasks"]  # one attempt: called back, then kept alive
    assert (status, retries) == ("COMPLETED", 0)
    task = Task.objects.get(pk=task_id)
    assert task.output == {"phase": "done"} and task.deliveries == 2  # TaskInProgress: polled again
    # It ran past its lease; a heartbeat (extendLease) came while it ran.
    ran_s = (task.ended_at - task.started_at).total_seconds()
    assert ran_s > LEASE_S
    assert task.last_heartbeat_at is not None and task.last_heartbeat_at > task.started_at

    approved = workflows["approved"]  # a WAIT with no duration, completed by the client's task update
    assert approved["status"] == "COMPLETED" and approved["output"] == {"by": "ann"}, (approved, log)
    assert approved["answer"] == approved["taskId"]

    steered = workflows["steered"]
    assert steered["statuses"] == ["PAUSED", "RUNNING", "TERMINATED", "RUNNING", "TERMINATED", "RUNNING"]
    assert steered["correlated"] == [steered["workflowId"]]
