"""The soak run behind ``manage.py nodeflow_soak`` (PostgreSQL only).

A steady load for a fixed time: a small mixed workflow (a SIMPLE task, a
fork of a SIMPLE task and a JSON_JQ_TRANSFORM system task, a join, a last
SIMPLE task) started at a fixed rate, served by the real server and roles as
separate processes (``tools.bench_shapes.start_production`` on a
``tools.stack.Stack``: granian and every role) and worked by real worker processes
(``python -m tools.soak URL KEY``).
A purge (``executions.purge.purge_executions``) runs periodically with a
short retention so that the tables stay bounded.

Every interval it reports, and at the end sums up: executions finished per
second and their end-to-end latency, the drift of throughput between the
first and the last interval, the resident memory (``VmRSS``) of every
process at the start and the end, and the row count and
``pg_total_relation_size`` of the main tables. It runs in a database of its
own, created at the start and dropped at the end. On a server with
autovacuum off it vacuums the main tables after each purge itself, or their
files would only grow however few rows they keep.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from django.db import connection

from nodeflow_worker import Client, StaleLease
from tools.bench_shapes import start_production
from tools.bench_stats import percentile
from tools.stack import PYTHON, Stack, drop_database, fresh_database, with_database

WORKFLOW = "soak_flow"
QUEUES = ("soak_a", "soak_b")
TABLES = (
    "executions_execution",
    "executions_task",
    "executions_timer",
    "executions_deciderequest",
    "quotas_semaphoreholder",
    "quotas_admission",
    "quotas_ratewindow",
    "quotas_workerpoll",
)
# Executions that ended within this of "now" may not have committed yet:
# they are counted in the next look.
COMMIT_LAG_S = 1.0
LOOK_EVERY_S = 1.0
START_THREADS = 4


@dataclass(frozen=True)
class Options:
    minutes: float
    rate: float = 10.0  # starts per second
    workers: int = 2  # worker processes
    retention_s: float = 60.0
    purge_every_s: float = 30.0
    report_every_s: float = 60.0
    warmup_s: float = 30.0  # load before the first interval: workers warm, first figures comparable
    database_name: str = "nodeflow_soak"
    keep_database: bool = False


# --- the workload -------------------------------------------------------------


def register(client: Client) -> None:
    def post(path: str, body: dict) -> None:
        client.http.post(f"/v1/ns/default/{path}", json=body).raise_for_status()

    for name in QUEUES:
        post(
            "metadata/task-definitions",
            {"name": name, "retryCount": 2, "retryDelaySeconds": 0.1, "startToCloseTimeout": 30},
        )
    post("metadata/task-definitions", {"name": "soak_sum", "retryCount": 2, "startToCloseTimeout": 30})
    post(
        "metadata/workflow-definitions",
        {
            "name": WORKFLOW,
            "tasks": [
                {"name": "soak_a", "taskReferenceName": "first", "inputParameters": {"value": "${workflow.input.n}"}},
                {
                    "name": "fork",
                    "taskReferenceName": "fork",
                    "type": "FORK_JOIN",
                    "forkTasks": [
                        [
                            {
                                "name": "soak_b",
                                "taskReferenceName": "left",
                                "inputParameters": {"value": "${first.output.value}"},
                            }
                        ],
                        [
                            {
                                "name": "soak_sum",
                                "taskReferenceName": "right",
                                "type": "JSON_JQ_TRANSFORM",
                                "inputParameters": {"value": "${first.output.value}", "queryExpression": ".value * 2"},
                            }
                        ],
                    ],
                },
                {"name": "join", "taskReferenceName": "join", "type": "JOIN", "joinOn": ["left", "right"]},
                {"name": "soak_a", "taskReferenceName": "last", "inputParameters": {"value": "${left.output.value}"}},
            ],
            "outputParameters": {"value": "${last.output.value}", "doubled": "${right.output.result}"},
        },
    )


def work(url: str, key: str) -> None:
    """A worker process: one thread per queue, batched polls and results,
    each task completed with ``value + 1``. Runs until killed."""
    client = Client(url, key, timeout_s=30)

    def serve(queue: str) -> None:
        while True:
            try:
                leased = client.poll(queue, worker_id=f"soak-{os.getpid()}", count=20, wait_s=1)
                if leased:
                    client.results(
                        [(task, "COMPLETED", {"value": (task.input.get("value") or 0) + 1}) for task in leased]
                    )
            except (httpx.HTTPError, StaleLease):
                time.sleep(0.5)

    threads = [threading.Thread(target=serve, args=(queue,), daemon=True) for queue in QUEUES]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


class Starter:
    """Starts the workflow at a fixed rate: start i is due at t0 + i / rate,
    whatever the previous ones took (a pool keeps a slow answer from holding
    the rest back)."""

    def __init__(self, client: Client, rate: float) -> None:
        self.client, self.rate = client, rate
        self.started = self.failed = self.late = 0
        self.counting = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="soak-starter", daemon=True)

    def _run(self) -> None:
        began = time.monotonic()
        pool = ThreadPoolExecutor(START_THREADS)
        try:
            for index in range(sys.maxsize):
                wait = began + index / self.rate - time.monotonic()
                if self.stopping.wait(max(wait, 0)):
                    return
                if wait < -1.0:
                    self.late += 1  # the pool fell a second behind: the server does not keep up
                pool.submit(self._start, index)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _start(self, index: int) -> None:
        try:
            self.client.start(WORKFLOW, {"n": index})
            ok = True
        except httpx.HTTPError:
            ok = False
        with self.counting:
            self.started += ok
            self.failed += not ok

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=30)


# --- what is measured ------------------------------------------------------------


def rss_kib(pid: int) -> int | None:
    """Resident memory of a process, from /proc (None when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def children(pid: int) -> list[int]:
    try:
        found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [int(child) for child in found]


def processes(stack: Stack) -> dict[str, int]:
    """Name → pid of every process of the run (the API server's workers too)."""
    named: dict[str, int] = {"soak": os.getpid()}
    for name, process in stack.processes.items():
        named[name] = process.pid
        if name == "api":
            named |= {f"api-worker-{i}": child for i, child in enumerate(sorted(children(process.pid)), 1)}
    return named


def memory(named: dict[str, int]) -> dict[str, int | None]:
    return {name: rss_kib(pid) for name, pid in named.items()}


def tables() -> dict[str, dict[str, int]]:
    """Rows and total size (bytes, with indexes and TOAST) of the main tables."""
    found = {}
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"SELECT count(*), pg_total_relation_size(%s) FROM {table}", [table])
            rows, size = cursor.fetchone()
            found[table] = {"rows": rows, "bytes": size}
    return found


def autovacuum_on() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SHOW autovacuum")
        return cursor.fetchone()[0] == "on"


def vacuum() -> None:
    """Plain VACUUM of the main tables: makes the purged rows' space reusable,
    as autovacuum would (needs autocommit, which Django's connection is in)."""
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"VACUUM {table}")


def finished_between(start: dt.datetime, end: dt.datetime) -> list[tuple[str, float]]:
    """(status, seconds from created to ended) of every execution that ended
    in [start, end)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT status, extract(epoch FROM ended_at - created_at) FROM executions_execution"
            " WHERE ended_at >= %s AND ended_at < %s",
            [start, end],
        )
        return [(status, float(seconds)) for status, seconds in cursor.fetchall()]


@dataclass
class Interval:
    """What was seen in one reporting interval, look by look."""

    index: int
    started_at: float
    finished: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)  # of the completed ones

    def add(self, ended: list[tuple[str, float]]) -> None:
        for status, seconds in ended:
            self.finished[status] = self.finished.get(status, 0) + 1
            if status == "COMPLETED":
                self.latencies.append(seconds)

    def figures(self, seconds: float, **extra) -> dict:
        completed = self.finished.get("COMPLETED", 0)
        return {
            "interval": self.index,
            "seconds": round(seconds, 1),
            "completed": completed,
            "completedPerSecond": round(completed / seconds, 2) if seconds else None,
            "notCompleted": {k: v for k, v in self.finished.items() if k != "COMPLETED"},
            "latencyP50s": round(percentile(self.latencies, 50) or 0.0, 3) if self.latencies else None,
            "latencyP99s": round(percentile(self.latencies, 99) or 0.0, 3) if self.latencies else None,
            **extra,
        }


# --- the run ------------------------------------------------------------------------


@contextmanager
def on_database(name: str) -> Iterator[None]:
    """Point this process's connection at ``name`` (as Django's test runner
    does for the test database), and back afterwards."""
    previous = connection.settings_dict["NAME"]
    connection.close()
    connection.settings_dict["NAME"] = name
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict["NAME"] = previous


class Soak:
    def __init__(self, *, admin_url: str, options: Options, out: Callable[[str], None]) -> None:
        self.admin_url, self.options, self.out = admin_url, options, out
        self.autovacuum = True
        self.stack = Stack(with_database(admin_url, options.database_name), env={"CONN_MAX_AGE": "600"})

    def run(self) -> dict:
        name = self.options.database_name
        fresh_database(self.admin_url, name)
        try:
            self.stack.manage("migrate", "--noinput", "-v", "0")
            key = (
                self.stack.manage("nodeflow_apikey", "create", "--namespace", "default", "--role", "admin")
                .strip()
                .splitlines()[-1]
            )
            self.start_stack(key)
            client = Client(self.stack.url, key, timeout_s=30)
            try:
                register(client)
                with on_database(name):
                    return self.drive(client)
            finally:
                client.close()
                self.stack.stop()
        finally:
            if not self.options.keep_database:
                drop_database(self.admin_url, name)

    def start_stack(self, key: str) -> None:
        """The benchmark's production shape (the server and every role,
        the system-task runner among them), plus the worker processes."""
        start_production(self.stack)
        for index in range(1, self.options.workers + 1):
            self.stack.add(f"worker-{index}", [PYTHON, "-m", "tools.soak", self.stack.url, key])

    def drive(self, client: Client) -> dict:
        self.wait_for_workers()
        starter = Starter(client, self.options.rate)
        starter.thread.start()
        try:
            return self.measure(starter)
        finally:
            starter.stop()

    def measure(self, starter: Starter) -> dict:
        options = self.options
        self.autovacuum = autovacuum_on()
        if not self.autovacuum:
            self.out("autovacuum is off on this server: the soak vacuums the main tables after each purge")
        time.sleep(options.warmup_s)
        named = processes(self.stack)
        rss_start, tables_start = memory(named), tables()
        began = time.monotonic()
        # Each look counts up to COMMIT_LAG_S ago, the first one too: every
        # interval's window is as long as the interval.
        wall_mark = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=COMMIT_LAG_S)
        end = began + options.minutes * 60
        intervals: list[dict] = []
        interval = Interval(1, began)
        next_purge, purged, purge_s = began + options.purge_every_s, 0, 0.0
        while True:
            now = time.monotonic()
            if now >= end or now - interval.started_at >= options.report_every_s:
                seconds = now - interval.started_at
                intervals.append(
                    interval.figures(
                        seconds, tables=tables(), rss=memory(named), purgedSoFar=purged, started=starter.started
                    )
                )
                self.out(self.line(intervals[-1]))
                if now >= end:
                    break
                interval = Interval(interval.index + 1, now)
            time.sleep(max(0.0, min(LOOK_EVERY_S, end - time.monotonic())))
            look_until = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=COMMIT_LAG_S)
            interval.add(finished_between(wall_mark, look_until))
            wall_mark = look_until
            if time.monotonic() >= next_purge:
                purge_began = time.monotonic()
                purged += self.purge()
                purge_s += time.monotonic() - purge_began
                next_purge = time.monotonic() + options.purge_every_s
        figures = summarise(
            options=options,
            intervals=intervals,
            rss_start=rss_start,
            rss_end=memory(named),
            tables_start=tables_start,
            starter=starter,
            purged=purged,
            purge_s=purge_s,
            seconds=time.monotonic() - began,
        )
        return {**figures, "autovacuum": self.autovacuum, "vacuumedAfterEachPurge": not self.autovacuum}

    def purge(self) -> int:
        from executions.purge import purge_executions

        purged = purge_executions(older_than=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=self.options.retention_s))
        if not self.autovacuum:
            vacuum()  # without it nothing reuses the purged rows' space, and the files only grow
        return purged

    def wait_for_workers(self, timeout_s: float = 60) -> None:
        """Until every worker process polled every queue (they boot slowly on a busy machine)."""
        give_up = time.monotonic() + timeout_s
        while time.monotonic() < give_up:
            with connection.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM quotas_workerpoll")
                if cursor.fetchone()[0] >= self.options.workers * len(QUEUES):
                    return
            time.sleep(0.2)
        raise RuntimeError(f"the workers did not poll within {timeout_s} s; logs in {self.stack.logdir}")

    @staticmethod
    def line(figures: dict) -> str:
        rows = {table.split("_", 1)[1]: value["rows"] for table, value in figures["tables"].items() if value["rows"]}
        size_mib = sum(value["bytes"] for value in figures["tables"].values()) / 2**20
        rss_mib = sum(value or 0 for value in figures["rss"].values()) / 1024
        return (
            f"[{figures['interval']}] {figures['completed']} completed in {figures['seconds']} s "
            f"({figures['completedPerSecond']}/s), p50 {figures['latencyP50s']} s, p99 {figures['latencyP99s']} s, "
            f"not completed {figures['notCompleted']}; rows {rows}; tables {size_mib:.1f} MiB; "
            f"RSS total {rss_mib:.0f} MiB; purged so far {figures['purgedSoFar']}"
        )


def summarise(
    *,
    options: Options,
    intervals: list[dict],
    rss_start: dict,
    rss_end: dict,
    tables_start: dict,
    starter: Starter,
    purged: int,
    purge_s: float,
    seconds: float,
) -> dict:
    full = [i for i in intervals if i["seconds"] >= options.report_every_s * 0.9] or intervals
    first, last = full[0]["completedPerSecond"], full[-1]["completedPerSecond"]
    drift = round((last - first) / first * 100, 1) if first else None
    first_p50, last_p50 = full[0]["latencyP50s"], full[-1]["latencyP50s"]
    latency_drift = round((last_p50 - first_p50) / first_p50 * 100, 1) if first_p50 and last_p50 else None
    growth = {
        name: {
            "startKiB": rss_start[name],
            "endKiB": rss_end.get(name),
            "growthKiB": (rss_end.get(name) or 0) - (rss_start[name] or 0),
            "growthPercent": round(((rss_end.get(name) or 0) - rss_start[name]) / rss_start[name] * 100, 1)
            if rss_start[name]
            else None,
        }
        for name in rss_start
    }
    completed = sum(i["completed"] for i in intervals)
    return {
        "options": {
            "minutes": options.minutes,
            "startsPerSecond": options.rate,
            "workerProcesses": options.workers,
            "retentionSeconds": options.retention_s,
            "purgeEverySeconds": options.purge_every_s,
            "reportEverySeconds": options.report_every_s,
            "warmupSeconds": options.warmup_s,
        },
        "seconds": round(seconds, 1),
        "started": starter.started,
        "startFailures": starter.failed,
        "startsLate": starter.late,
        "completed": completed,
        "completedPerSecond": round(completed / seconds, 2) if seconds else None,
        "throughputDriftPercent": drift,
        "firstIntervalPerSecond": first,
        "lastIntervalPerSecond": last,
        "latencyP50DriftPercent": latency_drift,
        "firstIntervalP50s": first_p50,
        "lastIntervalP50s": last_p50,
        "purged": purged,
        "purgeSeconds": round(purge_s, 2),
        "rss": growth,
        "tablesAtStart": tables_start,
        "intervals": intervals,
        "machine": {"cpus": os.cpu_count(), "loadAverage": os.getloadavg()},
    }


def summary_lines(figures: dict) -> list[str]:
    rss = ", ".join(
        f"{name} {v['startKiB'] // 1024 if v['startKiB'] else '?'}→{v['endKiB'] // 1024 if v['endKiB'] else '?'} MiB"
        for name, v in figures["rss"].items()
    )
    last_tables = figures["intervals"][-1]["tables"]
    sizes = ", ".join(
        f"{table}: {figures['tablesAtStart'][table]['rows']}→{value['rows']} rows, {value['bytes'] // 1024} KiB"
        for table, value in last_tables.items()
    )
    return [
        f"{figures['completed']} executions completed in {figures['seconds']} s ({figures['completedPerSecond']}/s); "
        f"{figures['started']} started, {figures['startFailures']} refused or failed, {figures['startsLate']} late",
        f"throughput drift, first → last interval: {figures['firstIntervalPerSecond']}/s → "
        f"{figures['lastIntervalPerSecond']}/s ({figures['throughputDriftPercent']} %); latency p50 "
        f"{figures['firstIntervalP50s']} s → {figures['lastIntervalP50s']} s ({figures['latencyP50DriftPercent']} %)",
        f"RSS start → end: {rss}",
        f"tables at the end: {sizes}",
        f"purged {figures['purged']} executions in {figures['purgeSeconds']} s of purging"
        + ("" if figures.get("autovacuum", True) else " (and vacuuming: autovacuum is off on this server)"),
    ]


if __name__ == "__main__":
    work(sys.argv[1], sys.argv[2])
