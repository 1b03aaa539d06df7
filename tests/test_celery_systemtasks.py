"""System tasks on Celery: a real ``celery -A nodeflow worker`` on the Redis
broker runs HTTP tasks end to end against this test's database, and its beat
recovers a task whose message never went out. Skipped only when Redis is
unreachable. Real processes and real time, bounded by WAIT_S."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from executions.models import Execution, ExecutionStatus, Task
from executions.system_tasks import celery_handoff
from nodeflow.celery import app
from tests.engine_helpers import register, start, task_def
from tests.procs.stack import PYTHON, ROOT, live_database_url
from tests.system_helpers import http_task, system_task

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BROKER_URL = os.environ.get("CELERY_TEST_BROKER_URL", "redis://127.0.0.1:6379/15")
WAIT_S = 45.0


def redis_unreachable() -> str | None:
    try:
        redis.Redis.from_url(BROKER_URL, socket_connect_timeout=1).ping()
    except redis.RedisError as exc:
        return f"Redis is unreachable at {BROKER_URL}: {exc}"
    return None


@pytest.fixture
def broker(settings) -> Iterator[str]:
    """A queue of its own on the test broker, for this process and the worker."""
    if reason := redis_unreachable():
        pytest.skip(reason)
    queue = f"nodeflow-test-{uuid.uuid4().hex[:12]}"
    settings.CELERY_BROKER_URL = BROKER_URL
    previous = {"broker_url": app.conf.broker_url, "task_default_queue": app.conf.task_default_queue}
    app.conf.update(broker_url=BROKER_URL, task_default_queue=queue)
    yield queue
    celery_handoff.uninstall()
    app.conf.update(previous)
    app.pool.force_close_all()
    redis.Redis.from_url(BROKER_URL).delete(queue)


@pytest.fixture
def celery_worker(broker: str) -> Iterator[Callable[..., subprocess.Popen]]:
    """celery_worker(beat=False) starts ``celery -A nodeflow worker`` on the test database."""
    logdir = Path(tempfile.mkdtemp(prefix="nodeflow-celery-"))
    env = {
        **os.environ,
        "DATABASE_URL": live_database_url(),
        "CELERY_BROKER_URL": BROKER_URL,
        "CELERY_TASK_DEFAULT_QUEUE": broker,
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    started: list[subprocess.Popen] = []

    def launch(*, beat: bool = False) -> subprocess.Popen:
        args = [
            PYTHON,
            "-m",
            "celery",
            "-A",
            "nodeflow",
            "worker",
            "-P",
            "threads",
            "-c",
            "4",
            "-Q",
            broker,
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "WARNING",
        ]
        if beat:
            args += ["-B", "-s", str(logdir / "beat-schedule")]
        log = open(logdir / "worker.log", "a")  # noqa: SIM115 - closed with the process
        started.append(subprocess.Popen(args, cwd=ROOT, env=env, stdout=log, stderr=log))
        return started[-1]

    yield launch
    for process in started:
        process.terminate()
    for process in started:
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_until_ended(execution_id: str) -> Execution:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        execution = Execution.objects.get(pk=execution_id)
        if execution.status != ExecutionStatus.RUNNING:
            return execution
        time.sleep(0.1)
    tasks = list(
        Task.objects.filter(execution_id=execution_id).values("path", "attempt", "status", "reason_for_incompletion")
    )
    raise AssertionError(f"execution {execution_id} did not end within {WAIT_S} s: {tasks}")


def test_it_runs_http_tasks_end_to_end_on_a_celery_worker(api, http_server, celery_worker):
    celery_handoff.install()  # this process hands ready system tasks to the broker after each commit
    celery_worker()
    task_def(api, "call", retryDelaySeconds=0.5, jitter=0)
    http_server.sequence = [(503, {"busy": True}), (200, {"order": 42})]
    register(
        api,
        "flow",
        http_task("call", http_server.url("/sequence")),
        system_task("double", "INLINE", expression="$.order * 2", order="${call.output.response.body.order}"),
        outputParameters={"doubled": "${double.output.result}"},
    )
    execution = wait_until_ended(start(api, "flow")["id"])
    assert execution.status == "COMPLETED", execution.reason_for_incompletion
    assert execution.output == {"doubled": 84}
    calls = list(Task.objects.filter(execution_id=execution.id, ref="call").order_by("attempt"))
    assert [t.status for t in calls] == ["FAILED", "COMPLETED"]  # the 503 was retried, by the worker
    assert all(t.worker_id.startswith("celery@") for t in calls)
    assert http_server.hits("/sequence") == 2


def test_it_recovers_a_task_whose_message_was_lost(api, http_server, celery_worker):
    # No hook installed here: the start commits and no message is sent, as if lost.
    register(api, "flow", http_task("call", http_server.url("/ok")))
    execution_id = start(api, "flow")["id"]
    celery_worker(beat=True)
    execution = wait_until_ended(execution_id)
    assert execution.status == "COMPLETED", execution.reason_for_incompletion
    assert http_server.hits("/ok") == 1
