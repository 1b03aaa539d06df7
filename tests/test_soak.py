"""``manage.py nodeflow_soak``: a short run keeps the command working (the
ten-minute figures are in docs/reliability.md). PostgreSQL only: it starts
the real server, roles and workers on a database of its own."""

from __future__ import annotations

import json
import os
import subprocess

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from tests.procs.stack import PYTHON, ROOT, live_database_url
from tools.stack import with_database

pytestmark = [pytest.mark.slow]


def test_it_reports_drift_memory_and_tables_with_a_purge_running(tmp_path):
    if connection.vendor != "postgresql":
        pytest.skip("the soak runs the real server on PostgreSQL; it refuses SQLite (tested below)")
    name = f"nodeflow_soak_test_{os.getpid()}"
    out = tmp_path / "soak.json"
    done = subprocess.run(
        [
            PYTHON,
            "manage.py",
            "nodeflow_soak",
            "--minutes",
            "0.1",
            "--rate",
            "5",
            "--workers",
            "1",
            "--warmup-seconds",
            "2",
            "--report-every-seconds",
            "2",
            "--retention-seconds",
            "1",
            "--purge-every-seconds",
            "1",
            "--database-name",
            name,
            "--json",
            str(out),
        ],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": live_database_url()},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(out.read_text())

    assert len(figures["intervals"]) >= 3
    assert figures["completed"] > 0 and figures["startFailures"] == 0
    assert figures["throughputDriftPercent"] is not None
    processes = figures["rss"]
    assert {"api", "api-worker-1", "decider", "sweeper", "systemtasks", "worker-1", "soak"} <= set(processes)
    assert all(value["startKiB"] and value["endKiB"] for value in processes.values()), processes
    assert figures["purged"] > 0  # the purge ran and kept up
    last = figures["intervals"][-1]["tables"]
    assert last["executions_execution"]["bytes"] > 0
    # Bounded: what is left is about retention + interval's worth of starts, not the whole run.
    assert last["executions_execution"]["rows"] < figures["started"]
    assert "throughput drift" in done.stdout and "RSS start → end" in done.stdout
    # The run's database is dropped at the end.
    with psycopg.connect(with_database(live_database_url(), "postgres"), autocommit=True) as conn:
        assert not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()


def test_it_refuses_sqlite_and_bad_options():
    if connection.vendor == "postgresql":
        with pytest.raises(CommandError, match="--minutes must be greater than 0"):
            call_command("nodeflow_soak", minutes=0)
        return
    with pytest.raises(CommandError, match="needs PostgreSQL"):
        call_command("nodeflow_soak", minutes=1)
