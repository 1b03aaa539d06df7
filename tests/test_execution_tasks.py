"""An execution's tasks a page at a time (GET …/executions/{id}/tasks), and
the execution view that shows at most NODE_FLOW_EXECUTION_VIEW_TASKS of
them with the cursor for the rest."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from django.test import override_settings

from tests.engine_helpers import complete, execution, poll, register, start

WIDTH = 30


@pytest.fixture
def fanned(api) -> dict:
    """A dynamic fork of WIDTH items, 16 at a time, 10 of them completed:
    the fork's row and 26 branches started (27 rows)."""
    register(
        api,
        "fanned",
        {
            "name": "fan",
            "taskReferenceName": "fan",
            "type": "FORK_JOIN_DYNAMIC",
            "maxConcurrency": 16,
            "inputParameters": {"items": "${workflow.input.items}"},
            "forkTask": {"name": "piece", "taskReferenceName": "one", "inputParameters": {"n": "${item}"}},
        },
    )
    started = start(api, "fanned", {"items": list(range(WIDTH))})
    for task in poll(api, "piece", count=10):
        complete(api, task, {"n": task["inputData"]["n"]})
    return started


def pages(api, execution_id: str, **params) -> list[list[dict]]:
    found, cursor = [], None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        response = api.get(f"executions/{execution_id}/tasks?{urlencode(query)}")
        assert response.status_code == 200, response.json()
        body = response.json()
        found.append(body["results"])
        cursor = body["next"]
        if cursor is None:
            return found


def test_pages_cover_the_run_once_in_seq_order(api, fanned):
    every = execution(api, fanned["id"])["tasks"]
    paged = pages(api, fanned["id"], limit=7)
    assert [len(page) for page in paged] == [7, 7, 7, 6]
    assert [t["taskId"] for page in paged for t in page] == [t["taskId"] for t in every]


def test_it_filters_by_status_and_path(api, fanned):
    done = [t for page in pages(api, fanned["id"], status="COMPLETED") for t in page]
    assert len(done) == 10 and {t["status"] for t in done} == {"COMPLETED"}
    (one,) = pages(api, fanned["id"], path="fan[3].one")[0]
    assert one["path"] == "fan[3].one"
    under = [t["path"] for page in pages(api, fanned["id"], pathPrefix="fan[2") for t in page]
    assert under == ["fan[2].one", *(f"fan[{n}].one" for n in range(20, 26))]


def test_the_view_shows_a_page_and_the_cursor_for_the_rest(api, fanned):
    with override_settings(NODE_FLOW_EXECUTION_VIEW_TASKS=12):
        view = execution(api, fanned["id"])
    assert len(view["tasks"]) == 12 and view["tasksNext"] is not None
    rest = api.get(f"executions/{fanned['id']}/tasks?cursor={view['tasksNext']}&limit=1000").json()
    assert rest["next"] is None
    shown = [t["taskId"] for t in view["tasks"]] + [t["taskId"] for t in rest["results"]]
    assert shown == [t["taskId"] for t in execution(api, fanned["id"])["tasks"]]
    assert execution(api, fanned["id"])["tasksNext"] is None  # all 27 fit in 1,000


def test_include_tasks_false_leaves_them_out(api, fanned):
    response = api.get(f"executions/{fanned['id']}?includeTasks=false")
    assert response.status_code == 200 and "tasks" not in response.json()


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"cursor": "bm9wZQ"}, "cursor"),
        ({"status": "DONE"}, "status"),
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"typo": "1"}, "typo"),
    ],
)
def test_bad_paging_is_a_400_naming_the_field(api, fanned, params, field):
    response = api.get(f"executions/{fanned['id']}/tasks?{urlencode(params)}")
    assert response.status_code == 400, response.json()
    assert field in str(response.json())


def test_an_unknown_execution_is_a_404(api):
    assert api.get("executions/01a233bc-adcd-78da-94d1-d70c873c62a2/tasks").status_code == 404
