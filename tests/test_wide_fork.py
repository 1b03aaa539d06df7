"""A wide dynamic fork costs each decision its open branches, not its width
(``executions.decider.fork_join``, settled branches): driven through the
HTTP API, with the rows each decision reads counted; the decider's side is
in tests/test_decider_settled.py."""

from __future__ import annotations

import pytest

from executions import executor
from executions.decider.fork_join import SETTLE_AT
from executions.models import Task
from tests.engine_helpers import execution, fail, no_retries, poll, register, report, start

WIDTH = 6 * SETTLE_AT
CONCURRENCY = 4


@pytest.fixture
def reads(monkeypatch) -> list[tuple[bool, int]]:
    """(settled rows included, rows read) of every read of a run to decide."""
    seen: list[tuple[bool, int]] = []
    read_runs = executor.read_runs

    def counting(executions, *, fields=None, settled=False):
        found = read_runs(executions, fields=fields, settled=settled)
        seen.extend((settled, len(rows)) for rows in found.values())
        return found

    monkeypatch.setattr(executor, "read_runs", counting)
    return seen


def wide(api, name: str = "wide") -> None:
    register(
        api,
        name,
        {
            "name": "fan",
            "taskReferenceName": "fan",
            "type": "FORK_JOIN_DYNAMIC",
            "maxConcurrency": CONCURRENCY,
            "inputParameters": {"items": "${workflow.input.items}"},
            "forkTask": {"name": "item_work", "taskReferenceName": "one", "inputParameters": {"n": "${item}"}},
        },
        {"name": "j", "taskReferenceName": "j", "type": "JOIN"},
    )


def drain(api, *, fail_item: int | None = None) -> None:
    """Complete every leased item (``fail_item``'s fails terminally) until none is left."""
    while leased := poll(api, "item_work", count=CONCURRENCY):
        for task in leased:
            n = task["inputData"]["n"]
            if n == fail_item:
                fail(api, task, "no", terminal=True)
            else:
                # 409 once a failed item has canceled the fork's other tasks
                assert report(api, task, "COMPLETED", {"n": n}).status_code in (200, 409)


def test_a_wide_fork_joins_every_item_reading_only_its_open_branches(api, reads):
    wide(api)
    started = start(api, "wide", {"items": list(range(WIDTH))})
    reads.clear()  # the start's answer read the run to show it
    drain(api)
    deciding = list(reads)
    view = execution(api, started["id"])
    assert view["status"] == "COMPLETED", view
    joined = next(t for t in view["tasks"] if t["path"] == "j")["outputData"]
    assert joined == {f"fan[{n}].one": {"n": n} for n in range(WIDTH)}
    assert len(view["tasks"]) == WIDTH + 2  # the view shows every row, settled or not
    partial = [count for settled, count in deciding if not settled]
    assert [count for settled, count in deciding if settled] == [WIDTH + 1]  # once, to join
    # Every other decision read the fork row, at most SETTLE_AT finished
    # branches not yet settled and the open ones (the worker finishes them in order).
    assert max(partial) <= 1 + SETTLE_AT + CONCURRENCY, partial
    assert not Task.objects.filter(settled_by__isnull=False).exists()  # unsettled when the fork ended


def test_a_failed_wide_fork_is_retried_from_its_failed_item(api, reads):
    wide(api)
    no_retries(api, "item_work")
    started = start(api, "wide", {"items": list(range(WIDTH))})
    drain(api, fail_item=WIDTH - 3)
    view = execution(api, started["id"])
    assert view["status"] == "FAILED", view
    assert not Task.objects.filter(settled_by__isnull=False).exists()

    assert api.post(f"executions/{started['id']}/retry", {}).status_code == 200
    drain(api)
    view = execution(api, started["id"])
    assert view["status"] == "COMPLETED", view
    joined = next(t for t in view["tasks"] if t["path"] == "j")["outputData"]
    assert joined == {f"fan[{n}].one": {"n": n} for n in range(WIDTH)}
    seqs = list(Task.objects.filter(execution_id=started["id"]).values_list("seq", flat=True))
    assert len(set(seqs)) == len(seqs)


def test_no_two_rows_of_a_wide_fork_share_a_seq(api):
    wide(api)
    started = start(api, "wide", {"items": list(range(WIDTH))})
    drain(api)
    seqs = list(Task.objects.filter(execution_id=started["id"]).values_list("seq", flat=True))
    assert len(set(seqs)) == len(seqs) == WIDTH + 2
