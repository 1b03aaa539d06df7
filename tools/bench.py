"""The benchmark behind ``manage.py nodeflow_bench`` (PostgreSQL only).

It builds a throw-away database, starts the real server (gunicorn) and the
decider and sweeper roles as separate processes, drives them with real HTTP
workers (``nodeflow_worker``), and measures:

(a) independent SIMPLE tasks completed per second, batched polls and results;
(b) the same unbatched (one task per poll, one result per call);
(c) a 10-step sequential workflow's end-to-end latency, p50/p99, and (c')
    the same with each result leasing the next step (eager dispatch);
(d) dispatch latency, ready → received by a long-polling worker, p50/p99;
(e) database commits per completed task (``pg_stat_database.xact_commit``);
and, in the same run, the baseline: pgbench single-row UPDATE TPS, 4 clients.

The drains are driven as separate workers would drive them (a connection
each, the server without keep-alive so gunicorn spreads them over its
processes), on analyzed tables, and timed to the last result; see
``Bench.drain`` and docs/engine.md. Commit counts are read with the server
stopped, so every backend has flushed its statistics. Starting the
executions is measured (and counted) apart from draining them. The machine may be shared, so the batched run's baseline is
taken right before its drain (and again at the start), and each phase notes
the load average it ran under.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
from django.conf import settings

from nodeflow.process import tune_gc
from nodeflow_worker import Client, LeasedTask
from tools.stack import Stack, with_database

TASK = "bench_task"
STEP = "bench_step"
SERVER_WORKERS = 3
# Enough for the 16 unbatched pollers; each thread keeps a database
# connection, and a shared PostgreSQL has a connection limit.
SERVER_THREADS = 8


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def start_server(stack: Stack, *, keep_alive: bool = True) -> None:
    """gunicorn on the stack's port, a decider and a sweeper; returns once
    the API answers. ``keep_alive=False`` for the throughput drains:
    gunicorn gives a kept-alive connection to one worker process for its
    life, so a few busy workers' connections can all land on one process
    (one GIL) while the others idle. Without keep-alive each request's
    connection goes to whichever process accepts it first, a free one, as
    it would through a proxy that opens a connection per request."""
    stack.add_gunicorn(
        "gunicorn", stack.port, workers=SERVER_WORKERS, threads=SERVER_THREADS, keep_alive_s=5 if keep_alive else 0
    )
    stack.add_role("decider", "nodeflow_decider")
    stack.add_role("sweeper", "nodeflow_sweeper")
    stack.wait_for_api()


class Bench:
    def __init__(
        self, *, admin_url: str, tasks: int, unbatched_tasks: int, latency_runs: int, out: Callable[[str], None]
    ):
        self.admin_url = admin_url
        self.db_name = "nodeflow_bench"
        self.tasks, self.unbatched_tasks, self.latency_runs = tasks, unbatched_tasks, latency_runs
        self.out = out
        self.stack = Stack(with_database(admin_url, self.db_name), env={"CONN_MAX_AGE": "600"})
        self.results: dict = {}

    # --- database --------------------------------------------------------
    def admin(self, sql: str) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql)

    def analyze(self) -> None:
        """Refresh the planner's statistics of the bench database, as
        autovacuum does on a server after this many inserts. Without them
        (autovacuum off, or a table too new), PostgreSQL plans the batch
        statements' ``= ANY(ids)`` as scans of the whole table."""
        with psycopg.connect(with_database(self.admin_url, self.db_name), autocommit=True) as conn:
            conn.execute("ANALYZE")

    def commits(self) -> int:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [self.db_name]).fetchone()
        if row is None:
            raise RuntimeError(f"PostgreSQL keeps no statistics of database {self.db_name}")
        return int(row[0])

    def setup(self) -> Client:
        self.admin(f"DROP DATABASE IF EXISTS {self.db_name} WITH (FORCE)")
        self.admin(f"CREATE DATABASE {self.db_name}")
        self.stack.manage("migrate", "--noinput", "-v", "0")
        key = (
            self.stack.manage("nodeflow_apikey", "create", "--namespace", "default", "--role", "admin")
            .strip()
            .splitlines()[-1]
        )
        start_server(self.stack)
        client = Client(self.stack.url, key)
        self.register(client)
        return client

    def register(self, client: Client) -> None:
        def post(path: str, body: dict) -> None:
            client.http.post(f"/v1/ns/default/{path}", json=body).raise_for_status()

        for name in (TASK, STEP):
            post("metadata/task-definitions", {"name": name, "retryCount": 0})
        post(
            "metadata/workflow-definitions", {"name": "bench_one", "tasks": [{"name": TASK, "taskReferenceName": "t"}]}
        )
        steps = [{"name": STEP, "taskReferenceName": f"s{i}"} for i in range(10)]
        post("metadata/workflow-definitions", {"name": "bench_ten", "tasks": steps})
        post(
            "metadata/workflow-definitions",
            {"name": "bench_dispatch", "tasks": [{"name": "bench_dispatch", "taskReferenceName": "d"}]},
        )

    # --- phases ----------------------------------------------------------
    def baseline(self) -> float:
        """pgbench: single-row UPDATE, 4 clients, 10 seconds."""
        name = "nodeflow_pgbench"
        self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        self.admin(f"CREATE DATABASE {name}")
        parts = urlsplit(self.admin_url)
        conn = ["-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 5432), "-U", parts.username or "postgres"]
        subprocess.run(["pgbench", *conn, "-i", "-s", "1", "-q", name], check=True, capture_output=True)
        with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
            script.write(
                "\\set aid random(1, 100000)\nUPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;\n"
            )
        done = subprocess.run(
            ["pgbench", *conn, "-n", "-c", "4", "-j", "2", "-T", "10", "-f", script.name, name],
            check=True,
            capture_output=True,
            text=True,
        )
        self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        found = re.search(r"tps = ([\d.]+)", done.stdout)
        if found is None:
            raise RuntimeError(f"pgbench printed no tps figure:\n{done.stdout}")
        return float(found.group(1))

    def start_many(self, client: Client, name: str, count: int) -> float:
        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda _: client.start(name), range(count)))
        return count / (time.monotonic() - started)

    def drain(self, client: Client, *, count: int, batch: int, threads: int) -> float:
        """``threads`` workers poll and complete until ``count`` tasks are
        done; tasks/s. Each worker has its own connections, as separate
        worker processes would: gunicorn hands a kept-alive connection to
        one server process for its life, so one shared pool would time one
        process's GIL. The clock stops at the result that reaches ``count``,
        not when the last idle long-poll returns."""
        done = 0
        finished_at = 0.0
        lock = threading.Lock()
        key = client.http.headers["x-api-key"]

        def work() -> None:
            nonlocal done, finished_at
            own = Client(str(client.http.base_url), key)
            try:
                while True:
                    with lock:
                        if done >= count:
                            return
                    leased = own.poll(TASK, worker_id=threading.current_thread().name, count=batch, wait_s=1)
                    if not leased:
                        continue
                    if batch > 1:
                        own.results([(task, "COMPLETED", {"ok": True}) for task in leased])
                    else:
                        own.complete(leased[0], {"ok": True})
                    with lock:
                        done += len(leased)
                        if done >= count and not finished_at:
                            finished_at = time.monotonic()
            finally:
                own.close()

        started = time.monotonic()
        with ThreadPoolExecutor(threads) as pool:
            for future in [pool.submit(work) for _ in range(threads)]:
                future.result()
        return count / ((finished_at or time.monotonic()) - started)

    def warm_up(self, client: Client) -> None:
        """A few polls of an empty queue, so the drain does not time the
        server processes' first requests (connections, caches)."""
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda _: client.poll("bench_warmup", worker_id="warmup"), range(12)))

    def throughput(
        self, client: Client, *, label: str, count: int, batch: int, threads: int, baseline: bool = False
    ) -> dict:
        before = self.commits()
        start_server(self.stack, keep_alive=False)
        start_rate = self.start_many(client, "bench_one", count)
        self.stack.stop()
        self.analyze()
        after_start = self.commits()
        # Under the same load as the drain that follows (the server is stopped).
        tps = self.baseline() if baseline else None
        start_server(self.stack, keep_alive=False)
        self.warm_up(client)
        load = os.getloadavg()[0]
        rate = self.drain(client, count=count, batch=batch, threads=threads)
        self.stack.stop()
        after_drain = self.commits()
        figures = {
            "tasksPerSecond": round(rate, 1),
            "startsPerSecond": round(start_rate, 1),
            "commitsPerTaskDrain": round((after_drain - after_start) / count, 3),
            "commitsPerTaskWithStart": round((after_drain - before) / count, 3),
            "tasks": count,
            "loadAverage": round(load, 2),
        }
        if tps is not None:
            figures["baselineTpsBeforeDrain"] = round(tps, 1)
        self.out(f"({label}) {figures}")
        return figures

    def sequential_latency(self, client: Client, *, eager: bool = False) -> dict:
        """One 10-step workflow at a time; the driver is its worker. With
        ``eager``, each result leases the next step (eager dispatch): one
        request per step instead of a result and a poll."""
        latencies = []
        for _ in range(self.latency_runs):
            started = time.perf_counter()
            client.start("bench_ten")
            task: LeasedTask | None = None
            for step in range(10):
                while task is None:
                    task = next(iter(client.poll(STEP, worker_id="seq", count=1, wait_s=5)), None)
                ask = {"workerId": "seq", "count": 1} if eager and step < 9 else None
                answer = client.result(task, "COMPLETED", output={"ok": True}, next=ask)
                task = next((LeasedTask.from_json(item) for item in answer.get("next", [])), None)
            latencies.append((time.perf_counter() - started) * 1000)
        return {
            "p50Ms": round(percentile(latencies, 0.5), 2),
            "p99Ms": round(percentile(latencies, 0.99), 2),
            "runs": len(latencies),
            "loadAverage": round(os.getloadavg()[0], 2),
        }

    def dispatch_latency(self, client: Client) -> dict:
        """A worker waits in a long-poll; latency = receipt - scheduledAt."""
        latencies: list[float] = []
        stop = threading.Event()

        def worker() -> None:
            while not stop.is_set():
                for task in client.poll("bench_dispatch", worker_id="dispatch", count=1, wait_s=2):
                    received = dt.datetime.now(dt.UTC)
                    scheduled = dt.datetime.fromisoformat(task.raw["scheduledAt"].replace("Z", "+00:00"))
                    latencies.append((received - scheduled).total_seconds() * 1000)
                    client.complete(task, {})

        thread = threading.Thread(target=worker, daemon=True)
        thread.start()
        time.sleep(0.5)  # the worker is parked in its long-poll before the first start
        for _ in range(self.latency_runs):
            client.start("bench_dispatch")
            time.sleep(0.05)  # one at a time: each start meets a waiting poller
        deadline = time.monotonic() + 10
        while len(latencies) < self.latency_runs and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        thread.join(timeout=5)
        return {
            "p50Ms": round(percentile(latencies, 0.5), 2),
            "p99Ms": round(percentile(latencies, 0.99), 2),
            "runs": len(latencies),
            "loadAverage": round(os.getloadavg()[0], 2),
        }

    def run(self) -> dict:
        # The benchmark's workers share the two cores with the server: tune
        # this process's collector as a server process's is, so it does not
        # walk Django's heap (loaded by manage.py) every few hundred
        # allocations.
        tune_gc(settings.NODE_FLOW_GC_THRESHOLD)
        self.out("baseline: pgbench single-row UPDATE, 4 clients …")
        baseline = self.baseline()
        self.out(f"baseline: {baseline:.0f} TPS")
        client = self.setup()
        try:
            self.stack.stop()
            batched = self.throughput(client, label="a: batched", count=self.tasks, batch=100, threads=4, baseline=True)
            unbatched = self.throughput(client, label="b: unbatched", count=self.unbatched_tasks, batch=1, threads=16)
            start_server(self.stack)
            self.warm_up(client)
            sequential = self.sequential_latency(client)
            self.out(f"(c) 10-step workflow end to end: {sequential}")
            eager = self.sequential_latency(client, eager=True)
            self.out(f"(c') the same, each result leasing the next step (eager dispatch): {eager}")
            dispatch = self.dispatch_latency(client)
            self.out(f"(d) dispatch latency: {dispatch}")
        finally:
            self.stack.stop()
            client.close()
        return {
            "baselinePgbenchUpdateTps": round(baseline, 1),
            "batched": batched,
            "unbatched": unbatched,
            # Against the baseline taken under the drain's own load.
            "batchedVsBaseline": round(batched["tasksPerSecond"] / batched["baselineTpsBeforeDrain"], 3),
            "batchedVsFirstBaseline": round(batched["tasksPerSecond"] / baseline, 3),
            "tenStepWorkflowLatency": sequential,
            "tenStepWorkflowLatencyEager": eager,
            "dispatchLatency": dispatch,
            "commitsPerTask": {
                "unbatchedDrain": unbatched["commitsPerTaskDrain"],
                "unbatchedWithStart": unbatched["commitsPerTaskWithStart"],
                "batchedDrain": batched["commitsPerTaskDrain"],
                "batchedWithStart": batched["commitsPerTaskWithStart"],
            },
            "machine": {"cpus": os.cpu_count(), "loadAverageAtEnd": round(os.getloadavg()[0], 2)},
        }


def write_json(figures: dict, path: str) -> None:
    Path(path).write_text(json.dumps(figures, indent=2) + "\n")
