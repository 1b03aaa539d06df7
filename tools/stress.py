"""The controls under load, across processes: ``manage.py nodeflow_stress``.

Several processes, each with many polling threads, lease from two queues
for a bounded time: ``stress_capped`` (concurrentExecLimit, a rate limit
and the semaphore ``stress_sem``) and ``stress_shared`` (the same semaphore
only). Every poller records each lease's interval as it saw it, from the
moment its poll returned to just before it reported the result: a subset
of the interval the server counts as in flight, so an overlap seen here is
a real one. The parent merges the records and reports the most seen at
once per control, and the most dispatches counted in one rate window (by
the server's ``startedAt``, the instant the window was charged).

Pollers call the services directly (``dispatch.poll``, ``results.report_result``),
not HTTP: what is measured is the database path every API process shares.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from django.db import connection, connections

from executions import dispatch, lifecycle, results
from executions.models import Execution
from executions.purge import delete_executions
from metadata import taskdefs, workflows
from metadata.models import TaskDefinition
from nodeflow.keys import ensure_namespace
from nodeflow.models import Namespace
from quotas import semaphores
from tools.stack import PYTHON, Stack, live_database_url

CAPPED, SHARED, SEMAPHORE = "stress_capped", "stress_shared", "stress_sem"


@dataclass
class Plan:
    namespace: str = "stress"
    processes: int = 4
    pollers: int = 8
    seconds: float = 10.0
    cap: int = 3  # 0: none
    permits: int = 4  # 0: no semaphore
    rate: int = 20  # per window; 0: none
    window_s: float = 1.0
    work_ms: tuple[float, float] = (2.0, 20.0)
    tasks: int = 1000  # per queue
    batch: int = 5


# --- the parent ---------------------------------------------------------------


def prepare(plan: Plan) -> Namespace:
    """A fresh namespace with the two queues' definitions, the semaphore,
    and ``plan.tasks`` ready tasks in each queue."""
    # Executions first: their snapshots are protected while they exist.
    delete_executions(list(Execution.objects.filter(namespace__name=plan.namespace).values_list("id", flat=True)))
    Namespace.objects.filter(name=plan.namespace).delete()
    namespace = ensure_namespace(name=plan.namespace)
    sem = [SEMAPHORE] if plan.permits else []
    rate = {"rate_limit_per_frequency": plan.rate, "rate_limit_frequency_seconds": plan.window_s} if plan.rate else {}
    for name, values in (
        (CAPPED, {"concurrent_exec_limit": plan.cap, "semaphores": sem, **rate}),
        (SHARED, {"semaphores": sem}),
    ):
        TaskDefinition.objects.create(
            namespace=namespace, name=name, retry_count=0, start_to_close_timeout=600, **values
        )
        workflows.register_workflow(
            namespace=namespace, body={"name": f"wf_{name}", "tasks": [{"name": name, "taskReferenceName": "t"}]}
        )
    taskdefs.forget_policies()
    if plan.permits:
        semaphores.set_semaphore(namespace=namespace, name=SEMAPHORE, permits=plan.permits)

    def start(name: str) -> None:
        try:
            lifecycle.start_execution(namespace=namespace, name=f"wf_{name}")
        finally:
            connections.close_all()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(start, [CAPPED, SHARED] * plan.tasks))
    return namespace


def run(plan: Plan, out=print) -> dict:
    """Prepare, run ``plan.processes`` children, and report."""
    prepare(plan)
    stack = Stack(live_database_url())
    workdir = stack.logdir
    plan_json = json.dumps(dataclasses.asdict(plan))
    out(
        f"stress: {plan.processes} processes × {plan.pollers} pollers for {plan.seconds:g} s "
        f"(cap {plan.cap}, permits {plan.permits}, rate {plan.rate}/{plan.window_s:g} s)"
    )
    began = time.monotonic()
    try:
        for index in range(plan.processes):
            stack.add(
                f"stress-{index}",
                [
                    PYTHON,
                    "manage.py",
                    "nodeflow_stress",
                    "--child",
                    str(workdir / f"{index}.json"),
                    "--plan",
                    plan_json,
                ],
            )
        codes = [process.wait(timeout=plan.seconds + 120) for process in stack.processes.values()]
    finally:
        stack.stop()  # a child still running after the wait is stopped, not left behind
    elapsed = time.monotonic() - began
    failed = [index for index, code in enumerate(codes) if code != 0]
    if failed:
        raise RuntimeError(f"stress children {failed} failed; logs in {workdir}")
    records = [
        record for index in range(plan.processes) for record in json.loads((workdir / f"{index}.json").read_text())
    ]
    figures = figures_of(plan, records, elapsed)
    for line in describe(plan, figures):
        out(line)
    return figures


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant (an end before a start at a tie)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = current = 0
    for _, step in events:
        current += step
        most = max(most, current)
    return most


def figures_of(plan: Plan, records: list[dict], elapsed: float) -> dict:
    capped = [(r["begun"], r["ended"]) for r in records if r["queue"] == CAPPED]
    both = [(r["begun"], r["ended"]) for r in records]
    windows: dict[int, int] = {}
    for r in records:
        if r["queue"] == CAPPED:
            index = math.floor(r["startedAt"] / plan.window_s)
            windows[index] = windows.get(index, 0) + 1
    return {
        "processes": plan.processes,
        "pollers": plan.pollers,
        "seconds": plan.seconds,
        "elapsedSeconds": round(elapsed, 2),
        "leases": {CAPPED: len(capped), SHARED: len(both) - len(capped)},
        "tasksPerSecond": round(len(records) / plan.seconds, 1),
        "concurrentExecLimit": {"limit": plan.cap, "maxObserved": max_overlap(capped)},
        "semaphore": {"limit": plan.permits, "maxObserved": max_overlap(both)},
        "rateLimit": {
            "limit": plan.rate,
            "windowSeconds": plan.window_s,
            "maxPerWindow": max(windows.values(), default=0),
            "windows": len(windows),
        },
    }


def violations(plan: Plan, figures: dict) -> list[str]:
    found = []
    if plan.cap and figures["concurrentExecLimit"]["maxObserved"] > plan.cap:
        found.append(f"{figures['concurrentExecLimit']['maxObserved']} in flight over a cap of {plan.cap}")
    if plan.permits and figures["semaphore"]["maxObserved"] > plan.permits:
        found.append(f"{figures['semaphore']['maxObserved']} holders over {plan.permits} permits")
    if plan.rate and figures["rateLimit"]["maxPerWindow"] > plan.rate:
        found.append(f"{figures['rateLimit']['maxPerWindow']} dispatches in one window over a limit of {plan.rate}")
    return found


def describe(plan: Plan, figures: dict) -> list[str]:
    cap, sem, rate = figures["concurrentExecLimit"], figures["semaphore"], figures["rateLimit"]
    return [
        f"  leases: {figures['leases'][CAPPED]} {CAPPED}, {figures['leases'][SHARED]} {SHARED} "
        f"({figures['tasksPerSecond']} tasks/s)",
        f"  concurrentExecLimit {cap['limit'] or 'off'}: at most {cap['maxObserved']} {CAPPED} in flight",
        f"  semaphore {SEMAPHORE} {sem['limit'] or 'off'} permits: at most {sem['maxObserved']} held ({CAPPED} + {SHARED})",
        f"  rateLimit {rate['limit'] or 'off'} per {rate['windowSeconds']:g} s: at most {rate['maxPerWindow']} "
        f"dispatches in one of {rate['windows']} windows",
    ]


# --- a child ------------------------------------------------------------------


def run_child(plan: Plan, out_path: str) -> None:
    namespace = Namespace.objects.get(name=plan.namespace)
    deadline = time.monotonic() + plan.seconds
    records: list[dict] = []
    lock = threading.Lock()
    threads = [
        threading.Thread(
            target=_poller,
            args=(
                plan,
                namespace,
                (CAPPED, SHARED)[index % 2],
                f"stress-{os.getpid()}-{index}",
                deadline,
                records,
                lock,
            ),
        )
        for index in range(plan.pollers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    Path(out_path).write_text(json.dumps(records))


def _poller(
    plan: Plan,
    namespace: Namespace,
    queue: str,
    worker_id: str,
    deadline: float,
    records: list[dict],
    lock: threading.Lock,
) -> None:
    rng = random.Random()
    try:
        while (left := deadline - time.monotonic()) > 0:
            leased = dispatch.poll(
                namespace=namespace, queue=queue, worker_id=worker_id, count=plan.batch, wait_s=min(1.0, left)
            )
            begun = time.time()  # every task of the batch is in flight from here
            for task in leased:
                time.sleep(rng.uniform(*plan.work_ms) / 1000)
                ended = time.time()
                results.report_result(
                    namespace=namespace,
                    result=results.Result(task_id=task.id, status="COMPLETED", lease_token=task.lease_token),
                )
                with lock:
                    records.append(
                        {"queue": queue, "begun": begun, "ended": ended, "startedAt": task.started_at.timestamp()}
                    )
    finally:
        connection.close()


def plan_from(options: dict) -> Plan:
    fields = {f.name for f in dataclasses.fields(Plan)}
    values = {k: v for k, v in options.items() if k in fields and v is not None}
    if "work_ms" in values:
        values["work_ms"] = tuple(values["work_ms"])
    return Plan(**values)
