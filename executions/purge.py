"""Purging finished executions (``manage.py nodeflow_purge``).

The unit is a **tree**: a root execution (no parent) with every
sub-workflow execution below it. A tree goes only when every member ended
(COMPLETED, FAILED, TIMED_OUT, TERMINATED) before the cutoff, so nothing a
running parent still reads (its children) and nothing a finished parent's
retry would reopen is removed alone. Executions started by a
``failureWorkflow`` are separate roots and go on their own.

Safe beside a live server and beside other purges:

- Each batch is one transaction. It locks the batch's execution rows with
  ``FOR UPDATE SKIP LOCKED`` (a retry, restart or decision holding one makes
  the purge skip that tree this run) and re-reads their status under the lock.
- Sweepers and deciders lock a timer or decide request *before* its
  execution; the purge locks the execution first. To keep that from
  deadlocking, the purge locks the trees' timers, decide requests and
  semaphore holders with ``SKIP LOCKED`` too and skips any tree one of whose
  rows another process holds.
- Roots are walked in id order (UUIDv7: start order) with a cursor, so a
  tree that is skipped is not looked at again in the same run and a run
  always ends. A run killed mid-way loses only its progress: each committed
  batch is whole, the rest is still there for the next run.

Everything that hangs off an execution goes with it: tasks (and their
semaphore holders), timers, messages, decide requests and admission tickets
(``purged_models`` lists them; a test keeps the list in step with the models).
With ``archive_dir``, each batch is first written as gzipped JSON lines (one
execution with its tasks and messages per line) and fsynced, before the
delete runs; a run killed between the two leaves an archive file whose
executions are still in the database and will be archived again by the next
run, so readers should de-duplicate by execution id.
"""

from __future__ import annotations

import datetime as dt
import gzip
import itertools
import json
import os
import pathlib
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models

from executions import attempts, runs
from executions.models import DecideRequest, Execution, ExecutionStatus, Message, Task, Timer
from nodeflow import clock, transactions
from nodeflow.models import Namespace
from quotas.models import Admission, SemaphoreHolder

FINISHED = (ExecutionStatus.COMPLETED, ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT, ExecutionStatus.TERMINATED)
DEFAULT_BATCH_SIZE = 500
# Rows other processes claim with SKIP LOCKED before they lock the execution:
# the purge must not wait on them (see the module docstring).
CLAIMED_BY_OTHERS: tuple[tuple[type[models.Model], str], ...] = (
    (Timer, "execution_id"),
    (DecideRequest, "execution_id"),
    (SemaphoreHolder, "task__execution_id"),
)

Progress = Callable[[int, int], None]


def purged_models() -> tuple[type[models.Model], ...]:
    """Every model whose rows are deleted with their execution."""
    return (Execution, Task, SemaphoreHolder, Timer, Message, DecideRequest, Admission)


def purge_executions(
    *,
    older_than: dt.datetime,
    namespace: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    archive_dir: pathlib.Path | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> int:
    """Delete every finished execution tree whose members all ended before
    ``older_than``, ``batch_size`` roots per transaction. Returns how many
    executions were purged (with ``dry_run``: would be, deleting nothing).
    ``progress(done, total)`` is called after each batch; ``total`` is an
    estimate taken at the start (finished executions older than the cutoff)."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    total = _finished(older_than, namespace).count()
    cursor: uuid.UUID | None = None
    done = 0
    stamp = clock.now().strftime("%Y%m%dT%H%M%S")
    for number in itertools.count(1):
        batch = _run_batch(older_than, namespace, batch_size, cursor, dry_run, archive_dir, f"{stamp}-{number:06d}")
        if batch.last_root is None:
            break
        cursor = batch.last_root
        done += batch.purged
        if progress is not None:
            progress(done, max(total, done))
    return done


def _finished(older_than: dt.datetime, namespace: str | None) -> models.QuerySet:
    rows = Execution.objects.filter(status__in=FINISHED, ended_at__lt=older_than)
    return rows.filter(namespace__name=namespace) if namespace is not None else rows


@dataclass
class _Batch:
    last_root: uuid.UUID | None = None  # None: no roots were left
    purged: int = 0


@dataclass
class _Tree:
    members: list[uuid.UUID] = field(default_factory=list)
    eligible: bool = True


def _run_batch(
    older_than: dt.datetime,
    namespace: str | None,
    size: int,
    cursor: uuid.UUID | None,
    dry_run: bool,
    archive_dir: pathlib.Path | None,
    name: str,
) -> _Batch:
    lock = not dry_run
    with transactions.outermost() if lock else nullcontext():
        roots = _roots(older_than, namespace, size, cursor, lock=lock)
        if not roots:
            return _Batch()
        trees = _trees(roots, older_than, lock=lock)
        if lock:
            _skip_claimed(trees)
        ids = [member for tree in trees.values() if tree.eligible for member in tree.members]
        if ids and not dry_run:
            if archive_dir is not None:
                write_archive(archive_dir / f"executions-{name}.jsonl.gz", ids)
            delete_executions(ids)
        return _Batch(last_root=roots[-1], purged=len(ids))


def _roots(
    older_than: dt.datetime, namespace: str | None, size: int, cursor: uuid.UUID | None, *, lock: bool
) -> list[uuid.UUID]:
    rows = _finished(older_than, namespace).filter(parent_execution__isnull=True)
    if cursor is not None:
        rows = rows.filter(pk__gt=cursor)
    rows = rows.order_by("pk")
    if lock:
        # Re-checks status and ended_at on the row as it is now (a retry that
        # committed meanwhile drops it); skips rows another transaction holds.
        # of=self: the namespace join must not lock the namespace row, which
        # every insert of the live server takes a key-share lock on.
        rows = rows.select_for_update(skip_locked=True, of=("self",))
    return list(rows.values_list("pk", flat=True)[:size])


def _trees(roots: list[uuid.UUID], older_than: dt.datetime, *, lock: bool) -> dict[uuid.UUID, _Tree]:
    """Each root's tree, level by level. A tree is ineligible when a member
    is active, ended after the cutoff, or locked by another transaction."""
    trees = {root: _Tree(members=[root]) for root in roots}
    owner = {root: root for root in roots}
    frontier = list(roots)
    while frontier:
        children = list(
            Execution.objects.filter(parent_execution_id__in=frontier).values_list("pk", "parent_execution_id")
        )
        held = _lock(Execution.objects.filter(pk__in=[pk for pk, _ in children]), lock)
        finished = set(
            Execution.objects.filter(
                pk__in=[pk for pk, _ in children], status__in=FINISHED, ended_at__lt=older_than
            ).values_list("pk", flat=True)
        )
        frontier = []
        for pk, parent in children:
            root = owner[parent]
            owner[pk] = root
            trees[root].members.append(pk)
            trees[root].eligible &= pk in held and pk in finished
            frontier.append(pk)
    return trees


def _lock(rows: models.QuerySet, lock: bool) -> set:
    """The pks of ``rows`` this transaction now holds (all of them without locking)."""
    if lock:
        rows = rows.select_for_update(skip_locked=True, of=("self",))
    return set(rows.values_list("pk", flat=True))


def _skip_claimed(trees: dict[uuid.UUID, _Tree]) -> None:
    """Mark ineligible every tree with a timer, decide request or semaphore
    holder that another process holds (it is waiting for the execution's
    lock, which this transaction has: deleting its row would deadlock)."""
    owner = {member: root for root, tree in trees.items() if tree.eligible for member in tree.members}
    for model, column in CLAIMED_BY_OTHERS:
        rows = model.objects.filter(**{f"{column}__in": list(owner)})
        every = dict(rows.values_list("pk", column))
        held = _lock(rows, True)
        for pk, execution_id in every.items():
            if pk not in held:
                trees[owner[execution_id]].eligible = False


def delete_executions(ids: list[uuid.UUID]) -> None:
    """Delete these executions and every row that hangs off them."""
    # Dependents first, by execution id: one statement per table, no rows
    # loaded. The execution delete then finds nothing left to cascade to.
    SemaphoreHolder.objects.filter(task__execution_id__in=ids).delete()
    for model in (Message, Admission):
        model.objects.filter(execution_id__in=ids).delete()
    attempts.purge(execution_ids=ids)
    runs.purge(execution_ids=ids)


# --- the archive --------------------------------------------------------------


def write_archive(path: pathlib.Path, ids: list[uuid.UUID]) -> None:
    """Write the executions ``ids`` with their tasks and messages as gzipped
    JSON lines to ``path``, durably: a temporary file, fsynced, renamed into
    place, and the directory fsynced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb") as compressed:
            for line in archive_lines(ids):
                compressed.write(line.encode() + b"\n")
        raw.flush()
        os.fsync(raw.fileno())
    os.replace(partial, path)
    _fsync_dir(path.parent)


def archive_lines(ids: Iterable[uuid.UUID]) -> Iterable[str]:
    """One JSON document per execution: its columns, ``tasks`` (every attempt
    of every run, in order) and ``messages``."""
    ids = list(ids)
    namespaces = dict(Namespace.objects.filter(executions__pk__in=ids).values_list("pk", "name").distinct())
    tasks = _grouped(Task.objects.filter(execution_id__in=ids).order_by("run", "seq").values())
    messages = _grouped(Message.objects.filter(execution_id__in=ids).order_by("pk").values())
    for row in Execution.objects.filter(pk__in=ids).order_by("pk").values():
        document = {**row, "namespace": namespaces.get(row["namespace_id"], "")}
        document["tasks"] = tasks.get(row["id"], [])
        document["messages"] = messages.get(row["id"], [])
        yield json.dumps(document, cls=DjangoJSONEncoder, separators=(",", ":"))


def _grouped(rows: Iterable[dict]) -> dict[uuid.UUID, list[dict]]:
    grouped: dict[uuid.UUID, list[dict]] = defaultdict(list)
    for row in rows:
        grouped[row["execution_id"]].append(row)
    return grouped


def _fsync_dir(directory: pathlib.Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # a platform without directory handles: the rename is all we can do
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
