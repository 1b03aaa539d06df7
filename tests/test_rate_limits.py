"""The task rate limit: fixed windows floor(now / size), counted at dequeue;
completion does not refill (SPEC §8); and the combined allowance."""

from __future__ import annotations

from nodeflow import clock
from quotas.models import RateWindow
from tests.controls_helpers import at, fill
from tests.engine_helpers import complete, execution, poll, task_at


def test_it_dispatches_at_most_the_limit_per_window(api, frozen_clock):
    fill(api, "partner_api", 10, rateLimitPerFrequency=3, rateLimitFrequencySeconds=60)
    leased = poll(api, "partner_api", count=10)
    assert len(leased) == 3
    assert poll(api, "partner_api", count=10) == []
    for item in leased:
        complete(api, item)
    assert poll(api, "partner_api", count=10) == []  # completion does not refill
    clock.advance(59.9)
    assert poll(api, "partner_api", count=10) == []
    clock.advance(0.1)  # 12:01:00, a new window
    assert len(poll(api, "partner_api", count=10)) == 3


def test_the_window_is_fixed_not_sliding(api, frozen_clock):
    fill(api, "partner_api", 10, rateLimitPerFrequency=2, rateLimitFrequencySeconds=10)
    clock.advance(9)  # the end of the window 12:00:00–12:00:10
    assert len(poll(api, "partner_api", count=10)) == 2
    clock.advance(1)  # the next window starts whatever happened a second ago
    assert len(poll(api, "partner_api", count=10)) == 2


def test_one_row_per_queue_carries_the_window(api, frozen_clock):
    fill(api, "partner_api", 10, rateLimitPerFrequency=5, rateLimitFrequencySeconds=60)
    poll(api, "partner_api", count=2)
    poll(api, "partner_api", count=2)
    clock.advance(60)
    poll(api, "partner_api", count=1)
    rows = list(RateWindow.objects.values_list("key", "used"))
    assert rows == [("partner_api", 1)]


def test_a_waiting_task_says_until_when(api, frozen_clock):
    (first, second) = fill(api, "partner_api", 2, rateLimitPerFrequency=1, rateLimitFrequencySeconds=60)
    poll(api, "partner_api", count=10)
    blocked = [task_at(execution(api, pk), "t")["blockedBy"] for pk in (first, second)]
    waiting = next(b for b in blocked if b is not None)
    assert waiting == {
        "control": "rateLimit",
        "limit": 1,
        "current": 1,
        "since": at(frozen_clock),
        "until": at(frozen_clock, 60),
    }


def test_the_allowance_is_the_minimum_over_every_control(api, frozen_clock):
    api.put("semaphores/erp", {"permits": 3})
    fill(
        api,
        "sync",
        10,
        concurrentExecLimit=4,
        rateLimitPerFrequency=5,
        rateLimitFrequencySeconds=60,
        semaphores=["erp"],
    )
    assert len(poll(api, "sync", count=10)) == 3  # the semaphore
    api.put("semaphores/erp", {"permits": 10})
    assert len(poll(api, "sync", count=10)) == 1  # the cap: 4 in flight
    leased = poll(api, "sync", count=10)
    assert leased == []
    task_def_body = api.get("metadata/task-definitions/sync").json()
    assert task_def_body["concurrentExecLimit"] == 4


def test_the_rate_limit_binds_under_a_looser_cap(api, frozen_clock):
    fill(api, "sync", 10, concurrentExecLimit=8, rateLimitPerFrequency=2, rateLimitFrequencySeconds=60)
    assert len(poll(api, "sync", count=10)) == 2
    assert poll(api, "sync", count=10) == []
