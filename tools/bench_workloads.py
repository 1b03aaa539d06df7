"""The peers' workloads, run on Node Flow (``../shared/peers/README.md``
defines them; ``tools/peers.py`` runs the peers themselves):

- **A** (throughput), after a 50-task warm-up: ``a_end_to_end`` (the worker
  polling, the client starts N executions one at a time, clock from the
  first start to the client seeing the last completion) and ``a_drain`` (N
  started up front through the bulk route while the worker is stopped, then
  released by starting it; clock from the release to the last completion);
- **B** (latency): ``b_latency``, a 10-step sequential flow of no-op steps,
  started and then polled every 2 ms until it ends; p50/p99/mean/min/max;
- the **wide fork**: ``fork_per_item``, a FORK_JOIN_DYNAMIC of no-op items
  (maxConcurrency 16) drained by batched workers, in ms per item;
- **starts/s** with nothing polling: ``starts_per_second`` (one at a time
  from 4 threads) and ``bulk_starts_per_second`` (the bulk route).

The worker is the SDK in a process of its own (``tools/bench_worker.py``)
with ``BENCH_WORKERS`` slots; the client is this process. How the client
sees completions is ``Observer``'s: by default a count query on the
database every 10 ms (B: the execution's status every 2 ms), as the
Procrastinate and DBOS benches poll theirs; ``BENCH_OBSERVE=api`` polls the
public routes instead (the executions list filtered by status, the
execution), which costs the server a request per poll.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import psycopg

from nodeflow_worker import Client
from tools.bench_stats import latency_summary
from tools.bench_worker import WorkerProcess

# The knobs every peer reads (../shared/peers/common.py), with its defaults.
N_TASKS = int(os.environ.get("BENCH_N", "2000"))
WORKERS = int(os.environ.get("BENCH_WORKERS", "4"))
B_RUNS = int(os.environ.get("BENCH_B_RUNS", "30"))
B_WARMUP = int(os.environ.get("BENCH_B_WARMUP", "3"))
B_STEPS = 10
A_WARMUP = 50
A_POLL_S = 0.010  # how often the client looks for "all N done"
B_POLL_S = 0.002  # how often the client looks for "the workflow is done"
FORK_CONCURRENCY = 16
BULK_STARTS = 100  # the bulk route's most starts per request
WAIT_LIMIT_S = 900.0

A_TASK, B_STEP, FORK_ITEM, UNPOLLED = "bench_a", "bench_b_step", "bench_fork_item", "bench_unpolled"
A_WARM, A_E2E, A_DRAIN = "bench_a_warmup", "bench_a_e2e", "bench_a_drain"
B_FLOW, FORK_FLOW, STARTS_FLOW = "bench_b", "bench_fork", "bench_starts"


def register_workloads(client: Client) -> None:
    """The task and workflow definitions of the workloads."""

    def post(path: str, body: dict) -> None:
        response = client.http.post(f"/v1/ns/{client.namespace}/{path}", json=body)
        if response.is_error:
            raise RuntimeError(f"{path} {body['name']}: {response.status_code} {response.text[:500]}")

    def simple(task_type: str, ref: str = "t") -> dict:
        return {"name": task_type, "taskReferenceName": ref}

    for task_type in (A_TASK, B_STEP, FORK_ITEM, UNPOLLED):
        post("metadata/task-definitions", {"name": task_type, "retryCount": 0})
    for name in (A_WARM, A_E2E, A_DRAIN):
        post("metadata/workflow-definitions", {"name": name, "tasks": [simple(A_TASK)]})
    steps = [simple(B_STEP, f"s{i}") for i in range(B_STEPS)]
    post("metadata/workflow-definitions", {"name": B_FLOW, "tasks": steps})
    fork = {
        "name": "fan",
        "taskReferenceName": "fan",
        "type": "FORK_JOIN_DYNAMIC",
        "forkTask": simple(FORK_ITEM, "noop"),
        "inputParameters": {"items": "${workflow.input.items}"},
        "maxConcurrency": FORK_CONCURRENCY,
    }
    post("metadata/workflow-definitions", {"name": FORK_FLOW, "tasks": [fork]})
    post("metadata/workflow-definitions", {"name": STARTS_FLOW, "tasks": [simple(UNPOLLED)]})


# --- how the client sees completions ------------------------------------------
class Observer:
    """Counts the client's looks (``statements``: each a transaction of the
    database's when it reads the database directly)."""

    statements = 0

    def active(self, name: str) -> int:
        """Executions of ``name`` still running (0: every one started has ended)."""
        raise NotImplementedError

    def not_completed(self, name: str) -> int:
        """Executions of ``name`` that ended other than COMPLETED."""
        raise NotImplementedError

    def status(self, execution_id: str) -> str:
        raise NotImplementedError

    def wait_ended(self, name: str, poll_s: float = A_POLL_S) -> float:
        """Look every ``poll_s`` until no execution of ``name`` runs; when
        it saw that (``time.perf_counter``)."""
        deadline = time.monotonic() + WAIT_LIMIT_S
        while self.active(name):
            if time.monotonic() > deadline:
                raise RuntimeError(f"executions of {name} still running after {WAIT_LIMIT_S:.0f} s")
            time.sleep(poll_s)
        return time.perf_counter()

    def wait_status(self, execution_id: str, poll_s: float = B_POLL_S) -> tuple[str, float]:
        deadline = time.monotonic() + WAIT_LIMIT_S
        while (status := self.status(execution_id)) in ("RUNNING", "PAUSED"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"execution {execution_id} still running after {WAIT_LIMIT_S:.0f} s")
            time.sleep(poll_s)
        return status, time.perf_counter()

    def close(self) -> None:
        pass


class SqlObserver(Observer):
    """Reads the executions table, as the Procrastinate and DBOS benches read
    their jobs and workflows: "still running" is the partial index of active
    executions, a status is a primary-key lookup. Autocommit: one
    transaction per look, counted, so the commit figures can leave them out."""

    def __init__(self, database_url: str, namespace: str = "default") -> None:
        from executions.models import Execution
        from nodeflow.models import Namespace

        self.conn = psycopg.connect(database_url, autocommit=True)
        table = Execution._meta.db_table
        row = self._one(f"SELECT id FROM {Namespace._meta.db_table} WHERE name = %s", [namespace])
        self.namespace_id = row[0]
        self._active = (
            f"SELECT count(*) FROM {table} WHERE namespace_id = %s AND name = %s AND status IN ('RUNNING', 'PAUSED')"
        )
        self._not_completed = f"SELECT count(*) FROM {table} WHERE namespace_id = %s AND name = %s AND status IN ('FAILED', 'TIMED_OUT', 'TERMINATED')"
        self._status = f"SELECT status FROM {table} WHERE id = %s"

    def _one(self, sql: str, params: list) -> tuple:
        self.statements += 1
        row = self.conn.execute(sql, params).fetchone()
        if row is None:
            raise RuntimeError(f"no row for {sql} {params}")
        return row

    def active(self, name: str) -> int:
        return int(self._one(self._active, [self.namespace_id, name])[0])

    def not_completed(self, name: str) -> int:
        return int(self._one(self._not_completed, [self.namespace_id, name])[0])

    def status(self, execution_id: str) -> str:
        return str(self._one(self._status, [execution_id])[0])

    def close(self) -> None:
        self.conn.close()


class ApiObserver(Observer):
    """Looks through the public routes: the executions list filtered by
    status (one row is enough to say "some are running"), the execution."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def _some(self, name: str, status: str) -> int:
        self.statements += 1
        url = f"/v1/ns/{self.client.namespace}/executions"
        response = self.client.http.get(url, params={"name": name, "status": status, "limit": 1})
        response.raise_for_status()
        return len(response.json()["results"])

    def active(self, name: str) -> int:
        return self._some(name, "RUNNING") or self._some(name, "PAUSED")

    def not_completed(self, name: str) -> int:
        return sum(self._some(name, status) for status in ("FAILED", "TIMED_OUT", "TERMINATED"))

    def status(self, execution_id: str) -> str:
        self.statements += 1
        return str(self.client.execution(execution_id)["status"])


def make_observer(kind: str, *, database_url: str, client: Client) -> Observer:
    if kind == "sql":
        return SqlObserver(database_url, client.namespace)
    if kind == "api":
        return ApiObserver(client)
    raise ValueError(f"BENCH_OBSERVE must be sql or api, not {kind!r}")


# --- starting -------------------------------------------------------------------
def bulk_start(client: Client, name: str, count: int, input: dict | None = None) -> None:
    """``count`` executions through ``POST …/executions/batch``, 100 a request."""
    url = f"/v1/ns/{client.namespace}/executions/batch"
    left = count
    while left:
        size = min(left, BULK_STARTS)
        response = client.http.post(url, json={"executions": [{"name": name, "input": input or {}}] * size})
        response.raise_for_status()
        refused = [answer for answer in response.json()["results"] if answer["status"] not in (200, 201)]
        if refused:
            raise RuntimeError(f"the bulk route refused {len(refused)} starts: {refused[0]}")
        left -= size


def starts_per_second(client: Client, name: str, count: int, threads: int = 4) -> float:
    """Starts one at a time from ``threads`` threads, nothing polling."""
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda _: client.start(name), range(count)))
    return count / (time.perf_counter() - started)


def bulk_starts_per_second(client: Client, name: str, count: int) -> float:
    started = time.perf_counter()
    bulk_start(client, name, count)
    return count / (time.perf_counter() - started)


# --- workloads A and B ----------------------------------------------------------
@dataclass
class Workloads:
    """Workloads A and B on one running shape (its API at ``url``)."""

    client: Client
    observer: Observer
    workers: WorkerProcess
    url: str
    slots: int = WORKERS
    out: Callable[[str], None] = print

    def _check(self, name: str) -> None:
        bad = self.observer.not_completed(name)
        if bad:
            raise RuntimeError(f"{bad} executions of {name} did not complete")

    def warm_up(self, count: int = A_WARMUP) -> None:
        """The worker polling A's queue, ``count`` tasks started one at a
        time and waited for; the worker is left running."""
        if not self.workers.running:
            self.workers.start(self.url, A_TASK, self.slots)
        for _ in range(count):
            self.client.start(A_WARM)
        self.observer.wait_ended(A_WARM)
        self._check(A_WARM)

    def a_end_to_end(self, n: int) -> dict:
        """The worker polling; N starts one at a time (each its own request
        and transaction); clock from the first start to the client seeing
        the last completion."""
        if not self.workers.running:
            self.workers.start(self.url, A_TASK, self.slots)
        looks = self.observer.statements
        first = time.perf_counter()
        for _ in range(n):
            self.client.start(A_E2E)
        enqueued = time.perf_counter()
        done = self.observer.wait_ended(A_E2E)
        figures = {
            "e2eTasksPerSecond": round(n / (done - first), 1),
            "enqueueTasksPerSecond": round(n / (enqueued - first), 1),
            "tasks": n,
            "observerLooks": self.observer.statements - looks,
        }
        self._check(A_E2E)
        return figures

    def a_drain(self, n: int) -> dict:
        """The worker stopped, N started up front through the bulk route,
        then released by starting the worker; clock from the release to
        the client seeing the last completion."""
        self.workers.stop()
        first = time.perf_counter()
        bulk_start(self.client, A_DRAIN, n)
        released = time.perf_counter()
        self.workers.start(self.url, A_TASK, self.slots)
        done = self.observer.wait_ended(A_DRAIN)
        self._check(A_DRAIN)
        return {
            "drainTasksPerSecond": round(n / (done - released), 1),
            "upfrontEnqueueTasksPerSecond": round(n / (released - first), 1),
            "tasks": n,
        }

    def b_latency(self, runs: int = B_RUNS, warmup: int = B_WARMUP) -> dict:
        """One 10-step flow at a time, the worker (SDK, eager dispatch)
        polling its steps; each run from the start request to the client
        seeing it COMPLETED (a look every 2 ms)."""
        self.workers.stop()
        self.workers.start(self.url, B_STEP, self.slots)

        def one() -> float:
            started = time.perf_counter()
            execution_id = self.client.start(B_FLOW)["id"]
            status, done = self.observer.wait_status(execution_id)
            if status != "COMPLETED":
                raise RuntimeError(f"workload B's execution {execution_id} ended {status}")
            return (done - started) * 1000

        for _ in range(warmup):
            one()
        samples = [one() for _ in range(runs)]
        self.workers.stop()
        return {**latency_summary(samples), "loadAverage": round(os.getloadavg()[0], 2)}


# --- the wide fork --------------------------------------------------------------
def drain_batched(
    url: str, api_key: str, task_type: str, *, count: int, batch: int, threads: int, namespace: str = "default"
) -> float:
    """``threads`` workers poll up to ``batch`` tasks and report them in one
    batch until ``count`` are done; when the result that reached ``count``
    was answered (``time.perf_counter``). Each has its own connections, as
    separate worker processes would."""
    done = 0
    finished_at = 0.0
    lock = threading.Lock()

    def work() -> None:
        nonlocal done, finished_at
        own = Client(url, api_key, namespace)
        try:
            while True:
                with lock:
                    if done >= count:
                        return
                leased = own.poll(task_type, worker_id=threading.current_thread().name, count=batch, wait_s=1)
                if not leased:
                    continue
                if batch > 1:
                    own.results([(task, "COMPLETED", {"ok": True}) for task in leased])
                else:
                    own.complete(leased[0], {"ok": True})
                with lock:
                    done += len(leased)
                    if done >= count and not finished_at:
                        finished_at = time.perf_counter()
        finally:
            own.close()

    with ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(work) for _ in range(threads)]:
            future.result()
    return finished_at or time.perf_counter()


def fork_per_item(client: Client, observer: Observer, url: str, api_key: str, items: int, threads: int = 4) -> dict:
    """A FORK_JOIN_DYNAMIC of ``items`` no-op items (maxConcurrency 16),
    drained by ``threads`` batched workers; from the start request to the
    client seeing the execution COMPLETED, in ms per item."""
    started = time.perf_counter()
    execution_id = client.start(FORK_FLOW, {"items": list(range(items))})["id"]
    drain_batched(url, api_key, FORK_ITEM, count=items, batch=FORK_CONCURRENCY, threads=threads)
    status, done = observer.wait_status(execution_id, A_POLL_S)
    if status != "COMPLETED":
        raise RuntimeError(f"the fork of {items} items ended {status}")
    seconds = done - started
    return {
        "items": items,
        "seconds": round(seconds, 2),
        "msPerItem": round(seconds * 1000 / items, 3),
        "loadAverage": round(os.getloadavg()[0], 2),
    }
