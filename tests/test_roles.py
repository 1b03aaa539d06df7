"""The roles: the stop path, --once, and long-poll wake-ups."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest
from django.core.management import call_command
from django.db import connection

from executions import dispatch
from executions.models import DecideRequest, Execution
from executions.roles.loop import stop_on_signals
from nodeflow.keys import ensure_namespace
from tests.procs.stack import PYTHON, ROOT, free_port, live_database_url


def _env() -> dict:
    return {**os.environ, "DATABASE_URL": live_database_url(), "LOG_LEVEL": "INFO"}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("command", [["nodeflow_decider"], ["nodeflow_sweeper"], ["nodeflow_run", "--addr", "PORT"]])
def test_it_stops_promptly_on_sigterm(command):
    command = [f"127.0.0.1:{free_port()}" if part == "PORT" else part for part in command]
    process = subprocess.Popen(
        [PYTHON, "manage.py", *command],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    started = ""
    for line in process.stdout:  # wait for the role to say it runs
        started += line
        if "started" in line:
            break
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0, started
    assert "stopped" in process.stdout.read()


def test_the_first_signal_drains_and_a_second_exits_at_once(monkeypatch):
    # One stop path for the role commands and nodeflow_run (which used to
    # ignore a second signal and wait for every thread).
    exits, stops = [], []
    monkeypatch.setattr(os, "_exit", exits.append)
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        stop_on_signals(lambda: stops.append("stop"))
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
        assert (stops, exits) == (["stop"], [])
        signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
        assert (stops, exits) == (["stop"], [1])
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


@pytest.mark.django_db
def test_it_does_due_work_once_and_exits(api):
    api.post("metadata/workflow-definitions", {"name": "w", "tasks": [{"name": "t", "taskReferenceName": "t"}]})
    execution = api.post("executions", {"name": "w"}).json()
    DecideRequest.objects.create(execution_id=execution["id"], due_at=Execution.objects.get().created_at)
    call_command("nodeflow_decider", "--once")
    assert not DecideRequest.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_it_wakes_a_long_poll_when_a_task_becomes_ready(api):
    api.post("metadata/workflow-definitions", {"name": "w", "tasks": [{"name": "wake", "taskReferenceName": "t"}]})
    namespace = ensure_namespace(name="default")
    got: list = []

    def poll() -> None:
        try:
            got.extend(dispatch.poll(namespace=namespace, queue="wake", worker_id="w", count=1, wait_s=10))
        finally:
            connection.close()

    thread = threading.Thread(target=poll)
    thread.start()
    time.sleep(0.3)  # let it park in its wait; the start below must wake it
    started = time.monotonic()
    api.post("executions", {"name": "w"})
    thread.join(timeout=10)
    assert len(got) == 1
    # Woken, not timed out: far sooner than the 10 s wait.
    assert time.monotonic() - started < 5
