"""The benchmark behind ``manage.py nodeflow_bench`` (PostgreSQL only).

It builds a throw-away database (``nodeflow_bench_<pid>``, dropped at the
end), runs Node Flow in two shapes (``tools/bench_shapes.py``: production,
granian and each role a process; ``make run``, one ``nodeflow_run``
process) and measures, in this order:

- the baseline: pgbench single-row UPDATE TPS, 4 clients (again right
  before the batched drain);
- (a) independent SIMPLE tasks completed per second, batched polls and
  results (and (b) unbatched, ``--unbatched-tasks``), production;
- starts/s with nothing polling: one at a time from 4 threads, and the bulk
  route (``POST …/executions/batch``), on each shape;
- the peers' workloads on each shape (``tools/bench_workloads.py``):
  A end to end (with its commits per task, ``pg_stat_database.xact_commit``)
  and A drain, after a 50-task warm-up; B, the 10-step flow's latency;
  and dispatch latency, ready → received by a long-polling worker;
- the wide FORK_JOIN_DYNAMIC at each of ``--fork-items``, ms per item,
  production;
- (c) the 10-step flow driven by the benchmark itself, a result and a poll
  per step, and (c') with each result leasing the next step, production.

With ``--peers`` it then runs the peers' benches (``tools/peers.py``) with
the Node Flow stack stopped, and prints every figure side by side with the
targets' ratios (``tools/bench_report.py``).

The throughput phases are driven as separate workers would drive them (a
connection each, the server without keep-alive so it spreads them
over its processes), on analyzed tables, and timed to the last result; see
``drain_batched`` and docs/performance.md. Commit counts are read with the
server stopped, so every backend has flushed its statistics. The machine
may be shared, so the batched run's baseline is taken right before its
drain (and again at the start), and each phase notes the load average it
ran under.
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
from tools import bench_workloads as workloads
from tools.bench_cpu import POSTGRES, CpuMeter, per_task_ms
from tools.bench_shapes import Shape, make_run, production
from tools.bench_stats import latency_summary
from tools.bench_worker import WorkerProcess
from tools.stack import PYTHON, ROOT, drop_database, fresh_database, with_database

TASK = "bench_task"
# PostgreSQL 15 flushes an idle backend's statistics (its commit count) within
# 10 s of its last statement; a listening session's reads of notices made
# later, while it stays idle, only at its next statement or its exit.
STATS_FLUSH_S = float(os.environ.get("BENCH_STATS_FLUSH_S", "11"))
IDLE_WINDOW_S = float(os.environ.get("BENCH_IDLE_WINDOW_S", "10"))
# A stopped session's statistics are written as it exits; a moment for the last to go.
STOPPED_FLUSH_S = 1.0
STEP = "bench_step"


def default_database_name() -> str:
    """A name of this run's own: two benchmarks on one server do not meet."""
    return f"nodeflow_bench_{os.getpid()}"


class Bench:
    def __init__(
        self,
        *,
        admin_url: str,
        tasks: int,
        unbatched_tasks: int,
        latency_runs: int,
        fork_items: list[int],
        shapes: list[str],
        out: Callable[[str], None],
        database_name: str | None = None,
        observe: str = "sql",
        keep_database: bool = False,
        baseline_seconds: int = 10,
    ):
        self.admin_url = admin_url
        self.db_name = database_name or default_database_name()
        self.database_url = with_database(admin_url, self.db_name)
        self.tasks, self.unbatched_tasks, self.latency_runs = tasks, unbatched_tasks, latency_runs
        self.fork_items = fork_items
        began = time.monotonic()
        # Each line says when in the run it was written.
        self.out = lambda line: out(f"[{time.monotonic() - began:6.1f} s] {line}")
        self.observe = observe
        self.keep_database = keep_database
        self.baseline_seconds = baseline_seconds
        self.shapes = [
            shape for shape in (production(self.database_url), make_run(self.database_url)) if shape.name in shapes
        ]
        self.key = ""
        self.workers: WorkerProcess | None = None

    # --- database --------------------------------------------------------
    def analyze(self) -> None:
        """Refresh the planner's statistics of the bench database, as
        autovacuum does on a server after this many inserts. Without them
        (autovacuum off, or a table too new), PostgreSQL plans the batch
        statements' ``= ANY(ids)`` as scans of the whole table."""
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            conn.execute("ANALYZE")

    def commits(self) -> int:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [self.db_name]).fetchone()
        if row is None:
            raise RuntimeError(f"PostgreSQL keeps no statistics of database {self.db_name}")
        return int(row[0])

    def setup(self) -> None:
        fresh_database(self.admin_url, self.db_name)
        stack = self.shapes[0].stack
        stack.manage("migrate", "--noinput", "-v", "0")
        self.key = (
            stack.manage("nodeflow_apikey", "create", "--namespace", "default", "--role", "admin")
            .strip()
            .splitlines()[-1]
        )
        self.shapes[0].start()
        client = self.client(self.shapes[0])
        try:
            self.register(client)
            workloads.register_workloads(client)
        finally:
            client.close()
            stack.stop()
        self.workers = WorkerProcess(api_key=self.key, root=ROOT, python=PYTHON, log_path=stack.logdir / "worker.log")

    def teardown(self) -> None:
        if self.workers is not None:
            self.workers.close()
        for shape in self.shapes:
            shape.stack.stop()
        if not self.keep_database:
            drop_database(self.admin_url, self.db_name)

    def client(self, shape: Shape) -> Client:
        return Client(shape.stack.url, self.key)

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

    # --- today's phases: baseline, (a), (b), (c), (c'), (d) ---------------
    def baseline(self) -> float:
        """pgbench: single-row UPDATE, 4 clients, 10 seconds (``--baseline-seconds``)."""
        name = f"nodeflow_pgbench_{os.getpid()}"
        fresh_database(self.admin_url, name)
        parts = urlsplit(self.admin_url)
        conn = ["-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 5432), "-U", parts.username or "postgres"]
        subprocess.run(["pgbench", *conn, "-i", "-s", "1", "-q", name], check=True, capture_output=True)
        with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
            script.write(
                "\\set aid random(1, 100000)\nUPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;\n"
            )
        done = subprocess.run(
            ["pgbench", *conn, "-n", "-c", "4", "-j", "2", "-T", str(self.baseline_seconds), "-f", script.name, name],
            check=True,
            capture_output=True,
            text=True,
        )
        drop_database(self.admin_url, name)
        os.unlink(script.name)
        found = re.search(r"tps = ([\d.]+)", done.stdout)
        if found is None:
            raise RuntimeError(f"pgbench printed no tps figure:\n{done.stdout}")
        return float(found.group(1))

    def start_many(self, client: Client, name: str, count: int) -> float:
        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda _: client.start(name), range(count)))
        return count / (time.monotonic() - started)

    def warm_up(self, client: Client) -> None:
        """A few polls of an empty queue, so a phase does not time the
        server processes' first requests (connections, caches)."""
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda _: client.poll("bench_warmup", worker_id="warmup"), range(12)))

    def throughput(
        self, shape: Shape, *, label: str, count: int, batch: int, threads: int, baseline: bool = False
    ) -> dict:
        client = self.client(shape)
        before = self.commits()
        shape.start(keep_alive=False)
        start_rate = self.start_many(client, "bench_one", count)
        shape.stack.stop()
        self.analyze()
        after_start = self.commits()
        # Under the same load as the drain that follows (the server is stopped).
        tps = self.baseline() if baseline else None
        shape.start(keep_alive=False)
        self.warm_up(client)
        load = os.getloadavg()[0]
        started = time.perf_counter()
        finished = workloads.drain_batched(shape.stack.url, self.key, TASK, count=count, batch=batch, threads=threads)
        rate = count / (finished - started)
        shape.stack.stop()
        client.close()
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
        return {**latency_summary(latencies), "loadAverage": round(os.getloadavg()[0], 2)}

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
        return {**latency_summary(latencies), "loadAverage": round(os.getloadavg()[0], 2)}

    # --- the peers' workloads, starts and the fork, per shape -------------
    def starts(self, shape: Shape, client: Client) -> dict:
        """Starts/s with nothing polling their queue (``workloads.UNPOLLED``)."""
        count = workloads.N_TASKS
        return {
            "oneAtATimePerSecond": round(workloads.starts_per_second(client, workloads.STARTS_FLOW, count, 4), 1),
            "bulkPerSecond": round(workloads.bulk_starts_per_second(client, workloads.STARTS_FLOW, count), 1),
            "starts": count,
            "loadAverage": round(os.getloadavg()[0], 2),
        }

    def connect(self, shape: Shape) -> tuple[Client, workloads.Observer, workloads.Workloads]:
        """A client of the shape, the observer of its runs and the workloads
        driven through them."""
        assert self.workers is not None
        client = self.client(shape)
        observer = workloads.make_observer(self.observe, database_url=self.database_url, client=client)
        return client, observer, workloads.Workloads(client, observer, self.workers, shape.stack.url, out=self.out)

    def shape_workloads(self, shape: Shape) -> dict:
        """Workloads A and B, dispatch (and for production the fork, (c)
        and (c')) on one running shape; A end to end's commits per task
        (``end_to_end_with_commits``) and the shape's idle commits/s."""
        assert self.workers is not None
        client, observer, run = self.connect(shape)
        figures: dict = {}
        try:
            shape.start()
            if shape.name != "production":  # production's are measured without keep-alive, before
                self.warm_up(client)
                figures["starts"] = self.starts(shape, client)
                self.out(f"[{shape.name}] starts with nothing polling: {figures['starts']}")
            run.warm_up()
            figures["aEndToEnd"], figures["idle"] = self.end_to_end_with_commits(shape, run, observer)
            self.out(f"[{shape.name}] idle: {figures['idle']}")
            self.out(f"[{shape.name}] A end to end: {figures['aEndToEnd']}")
            # The count was read with the shape stopped: the rest runs on it
            # started again, through new connections.
            observer.close()
            client.close()
            client, observer, run = self.connect(shape)
            shape.start()
            run.warm_up()
            figures["aDrain"] = run.a_drain(workloads.N_TASKS)
            self.out(f"[{shape.name}] A drain: {figures['aDrain']}")
            figures["b"] = run.b_latency()
            self.out(f"[{shape.name}] B, 10-step flow: {figures['b']}")
            figures["dispatch"] = self.dispatch_latency(client)
            self.out(f"[{shape.name}] dispatch latency: {figures['dispatch']}")
            if shape.name == "production":
                figures["fork"] = []
                for items in self.fork_items:
                    fork = workloads.fork_per_item(client, observer, shape.stack.url, self.key, items)
                    figures["fork"].append(fork)
                    self.out(f"[{shape.name}] FORK_JOIN_DYNAMIC: {fork}")
                if self.latency_runs:
                    figures["sequential"] = self.sequential_latency(client)
                    self.out(f"(c) 10-step workflow end to end, a result and a poll per step: {figures['sequential']}")
                    figures["sequentialEager"] = self.sequential_latency(client, eager=True)
                    self.out(f"(c') the same, each result leasing the next step: {figures['sequentialEager']}")
        finally:
            self.workers.stop()
            shape.stack.stop()
            observer.close()
            client.close()
        return figures

    def end_to_end_with_commits(
        self, shape: Shape, run: workloads.Workloads, observer: workloads.Observer
    ) -> tuple[dict, dict]:
        """A end to end between two reads of the database's commit count:
        the first once every backend has been idle long enough to have
        flushed its statistics (PostgreSQL holds an idle backend's for up
        to 10 s), the second with the shape stopped. A session listening
        for notices reads each in a transaction of its own while idle, and
        PostgreSQL counts those made more than 10 s after the session's
        last statement only at its next statement or its exit: the
        system-task role's listener runs none after its ``LISTEN``, so read
        while the shape runs, its reads went uncounted. The shape
        is left stopped; the caller starts it again. The shape's idle
        commits/s are measured first (the worker stopped: the roles'
        ticks), and the idle wait after the run is taken off at that rate;
        the client's own looks (a transaction each) are left out; the
        shape's own stop is counted. Also where its CPU went
        (``bench_cpu``), in ms per task: the server, the roles, the worker,
        the benchmark's own process (the client and its looks) and
        PostgreSQL."""
        assert self.workers is not None
        self.workers.stop()
        time.sleep(STATS_FLUSH_S)
        idle_from, idle_started = self.commits(), time.perf_counter()
        time.sleep(IDLE_WINDOW_S)
        before, idle_ended = self.commits(), time.perf_counter()
        idle_rate = (before - idle_from) / (idle_ended - idle_started)
        looks = observer.statements
        self.workers.start(run.url, workloads.A_TASK, run.slots)
        time.sleep(0.5)  # the worker is parked in its first long-poll: "already running"
        groups = {**shape.cpu_groups(), "worker": [self.workers.process.pid], "client": [os.getpid()], POSTGRES: []}
        meter = CpuMeter(groups)
        meter.start()
        started = time.perf_counter()
        e2e = run.a_end_to_end(workloads.N_TASKS)
        cpu, took = per_task_ms(meter.stop(), workloads.N_TASKS), time.perf_counter() - started
        e2e["cpuMsPerTask"] = cpu
        # Where the kept-alive connections landed: near 1 when one of the
        # server's processes took the client's starts and the worker's polls.
        e2e["serverBusiestProcessShare"] = meter.busiest_share("server")
        if cpu["total"] is not None:
            e2e["coresBusy"] = round(cpu["total"] * workloads.N_TASKS / 1000 / took, 2)
        self.workers.stop()
        ended = time.perf_counter()
        time.sleep(STATS_FLUSH_S)
        shape.stack.stop()
        stopped = time.perf_counter()
        time.sleep(STOPPED_FLUSH_S)
        after = self.commits()
        commits = after - before - idle_rate * (stopped - ended)
        if self.observe == "sql":
            commits -= observer.statements - looks
        e2e["commitsPerTask"] = round(commits / workloads.N_TASKS, 3)
        e2e["commitsCounted"] = after - before
        if self.observe != "sql":
            e2e["commitsIncludeObserverRequests"] = True
        e2e["loadAverage"] = round(os.getloadavg()[0], 2)
        idle = {"commitsPerSecond": round(idle_rate, 2), "seconds": IDLE_WINDOW_S}
        return e2e, idle

    def production_starts(self, shape: Shape) -> dict:
        client = self.client(shape)
        try:
            shape.start(keep_alive=False)
            self.warm_up(client)
            figures = self.starts(shape, client)
        finally:
            shape.stack.stop()
            client.close()
        self.out(f"[production] starts with nothing polling (no keep-alive): {figures}")
        return figures

    def run(self) -> dict:
        # The benchmark's client shares the two cores with the server: tune
        # this process's collector as a server process's is, so it does not
        # walk Django's heap (loaded by manage.py) every few hundred
        # allocations.
        tune_gc(settings.NODE_FLOW_GC_THRESHOLD)
        self.out("baseline: pgbench single-row UPDATE, 4 clients …")
        baseline = self.baseline()
        self.out(f"baseline: {baseline:.0f} TPS")
        figures: dict = {
            "settings": {
                "N": workloads.N_TASKS,
                "workers": workloads.WORKERS,
                "bRuns": workloads.B_RUNS,
                "bWarmup": workloads.B_WARMUP,
                "aWarmup": workloads.A_WARMUP,
                "observe": self.observe,
                "batchedTasks": self.tasks,
                "forkItems": self.fork_items,
                "database": self.db_name,
            },
            "baselinePgbenchUpdateTps": round(baseline, 1),
            "shapes": {},
        }
        try:
            self.setup()
            for shape in self.shapes:
                if shape.name == "production":
                    self.production_phases(shape, figures, baseline)
                shape_figures = self.shape_workloads(shape)
                figures["fork"] = shape_figures.pop("fork", figures.get("fork", []))
                for key, name in (
                    ("sequential", "tenStepWorkflowLatency"),
                    ("sequentialEager", "tenStepWorkflowLatencyEager"),
                ):
                    if key in shape_figures:
                        figures[name] = shape_figures.pop(key)
                figures["shapes"][shape.name] = {**figures["shapes"].get(shape.name, {}), **shape_figures}
                if "dispatch" in shape_figures and shape.name == "production":
                    figures["dispatchLatency"] = shape_figures["dispatch"]
        except BaseException:
            self.out("the processes' logs: " + ", ".join(str(shape.stack.logdir) for shape in self.shapes))
            raise
        finally:
            self.teardown()
        figures["machine"] = {"cpus": os.cpu_count(), "loadAverageAtEnd": round(os.getloadavg()[0], 2)}
        return figures

    def production_phases(self, shape: Shape, figures: dict, baseline: float) -> None:
        """(a), (b) and the starts, each on a server without keep-alive."""
        commits: dict = {}
        if self.tasks:
            batched = self.throughput(shape, label="a: batched", count=self.tasks, batch=100, threads=4, baseline=True)
            figures["batched"] = batched
            figures["batchedVsBaseline"] = round(batched["tasksPerSecond"] / batched["baselineTpsBeforeDrain"], 3)
            figures["batchedVsFirstBaseline"] = round(batched["tasksPerSecond"] / baseline, 3)
            commits |= {
                "batchedDrain": batched["commitsPerTaskDrain"],
                "batchedWithStart": batched["commitsPerTaskWithStart"],
            }
        if self.unbatched_tasks:
            unbatched = self.throughput(shape, label="b: unbatched", count=self.unbatched_tasks, batch=1, threads=16)
            figures["unbatched"] = unbatched
            commits |= {
                "unbatchedDrain": unbatched["commitsPerTaskDrain"],
                "unbatchedWithStart": unbatched["commitsPerTaskWithStart"],
            }
        figures["commitsPerTask"] = commits
        figures["shapes"]["production"] = {"starts": self.production_starts(shape)}


def write_json(figures: dict, path: str) -> None:
    Path(path).write_text(json.dumps(figures, indent=2) + "\n")
