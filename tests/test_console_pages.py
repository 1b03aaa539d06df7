"""Operator pages (SPEC §10), through Django's test client: the executions
list and its filters, one execution drawn as a graph with its tasks, the
controls of a namespace, and who may see them. The graph's layout is tested
on its own below."""

from __future__ import annotations

import re
from html import unescape

import pytest

from console import graph
from executions import breakers
from executions.models import ExecutionStatus, TaskStatus
from nodeflow import clock
from nodeflow.models import Namespace
from tests.controls_helpers import fill
from tests.engine_helpers import (
    complete,
    execution,
    fail,
    poll,
    poll_one,
    register,
    simple,
    start,
    sweep,
    task_at,
    task_def,
)

pytestmark = pytest.mark.django_db

LIST = "/console/"
PAGES = [LIST, "/console/controls", "/console/ns/default/controls"]


def page(client, url: str, status: int = 200) -> str:
    response = client.get(url)
    assert response.status_code == status, (response.status_code, response.content[:500])
    return response.content.decode()


def listed_ids(html: str) -> list[str]:
    return re.findall(r'<tr data-id="([0-9a-f-]{36})"', html)


def nodes(html: str) -> dict[str, dict]:
    """key → {status, fill} of each graph node on an execution page."""
    found = {}
    for match in re.finditer(
        r'<g class="node[^"]*" data-key="([^"]+)"[^>]*data-status="([A-Z_]+)">(.*?)</g>', html, re.S
    ):
        fill_ = re.search(r'<rect [^>]*fill="(#[0-9a-f]{6})"', match.group(3)).group(1)
        found[match.group(1)] = {"status": match.group(2), "fill": fill_, "body": match.group(3)}
    return found


# --- who may see the pages ------------------------------------------------------


def test_it_sends_anonymous_visitors_to_the_admin_login(client, api):
    (pk,) = fill(api, "charge", 1)
    for url in [*PAGES, f"/console/executions/{pk}"]:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/admin/login/?next=/console/"), response["Location"]


def test_it_sends_users_who_are_not_staff_to_the_login(client, django_user_model, api):
    user = django_user_model.objects.create_user("viewer", password="pw-viewer-1")
    client.force_login(user)
    (pk,) = fill(api, "charge", 1)
    for url in [*PAGES, f"/console/executions/{pk}"]:
        response = client.get(url)
        assert response.status_code == 302 and "/admin/login/" in response["Location"], url


def test_staff_see_every_page(admin_client, api):
    (pk,) = fill(api, "charge", 1)
    assert pk in page(admin_client, LIST)
    assert "Controls of" in page(admin_client, "/console/ns/default/controls")
    assert page(admin_client, f"/console/executions/{pk}").count('class="node') == 1
    assert admin_client.get("/console/controls")["Location"] == "/console/ns/default/controls"


def test_it_answers_404_for_what_does_not_exist(admin_client, api):
    api.get("queues")  # the namespace exists
    assert "no execution" in page(admin_client, "/console/executions/4b1e7f0e-0000-4000-8000-000000000000", 404)
    assert "no execution" in page(admin_client, "/console/executions/not-a-uuid", 404)
    assert "no namespace nowhere" in page(admin_client, "/console/ns/nowhere/controls", 404)


def test_it_only_answers_get(admin_client):
    assert admin_client.post(LIST).status_code == 405


# --- the executions list ----------------------------------------------------------


@pytest.fixture
def spread(api, api_for, frozen_clock) -> dict[str, str]:
    """Executions in two namespaces, of two workflows, at different times,
    one of them completed, one with a correlation id."""
    other = api_for("admin", "other")
    for client in (api, other):
        task_def(client, "t")
        register(client, "orders", simple("t"))
        register(client, "refunds", simple("t"))
    ids = {"orders-1": start(api, "orders")["id"]}
    clock.advance(60)
    ids["refunds-1"] = start(api, "refunds", correlationId="order-77")["id"]
    clock.advance(60)
    ids["orders-2"] = start(api, "orders")["id"]
    complete(api, poll_one(api, "t"))  # the oldest ready task: orders-1's
    clock.advance(60)
    ids["other-orders"] = start(other, "orders")["id"]
    return ids


def test_the_list_is_newest_first_across_namespaces(admin_client, spread):
    html = page(admin_client, LIST)
    assert listed_ids(html) == [spread[k] for k in ("other-orders", "orders-2", "refunds-1", "orders-1")]
    assert f'href="/console/executions/{spread["orders-1"]}"' in html


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("namespace=other", ["other-orders"]),
        ("namespace=default&name=orders", ["orders-2", "orders-1"]),
        ("status=COMPLETED", ["orders-1"]),
        ("status=RUNNING&namespace=default", ["orders-2", "refunds-1"]),
        ("correlationId=order-77", ["refunds-1"]),
        ("since=2026-06-01T12:01&until=2026-06-01T12:03", ["orders-2", "refunds-1"]),
        ("since=2026-06-01T12:02", ["other-orders", "orders-2"]),
        ("until=2026-06-01T12:00:30", ["orders-1"]),
        ("name=nothing", []),
    ],
)
def test_it_filters(admin_client, spread, query, expected):
    assert listed_ids(page(admin_client, f"{LIST}?{query}")) == [spread[key] for key in expected]


def test_it_pages_with_a_cursor_and_keeps_the_filters(admin_client, spread):
    first = page(admin_client, f"{LIST}?limit=2&namespace=default")
    assert listed_ids(first) == [spread["orders-2"], spread["refunds-1"]]
    older = unescape(re.search(r'<a href="\?([^"]+)" id="next-page">', first).group(1))
    assert "namespace=default" in older and "limit=2" in older
    second = page(admin_client, f"{LIST}?{older}")
    assert listed_ids(second) == [spread["orders-1"]]
    assert 'id="next-page"' not in second
    assert 'id="first-page"' in second


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("status=DONE", "status"),
        ("namespace=nowhere", "namespace"),
        ("since=yesterday", "since"),
        ("since=2026-06-02T00:00&until=2026-06-01T00:00", "until"),
        ("limit=0", "limit"),
        ("limit=many", "limit"),
        ("cursor=not-ours", "cursor"),
        ("name=" + "n" * 129, "name"),
    ],
)
def test_bad_filters_are_a_400_naming_the_field(admin_client, api, query, field):
    fill(api, "charge", 1)
    html = page(admin_client, f"{LIST}?{query}", 400)
    assert f'<li data-field="{field}">' in html
    assert listed_ids(html) == []


# --- one execution ------------------------------------------------------------------


def test_it_shows_each_attempt_with_timings_blocked_by_and_errors(admin_client, api, frozen_clock):
    task_def(api, "charge", retryCount=1, retryLogic="FIXED", retryDelaySeconds=30, jitter=0)
    register(api, "pay", simple("charge"))
    pk = start(api, "pay", correlationId="c-9")["id"]
    leased = poll_one(api, "charge", worker="w-7")
    clock.advance(2.5)
    fail(api, leased, "card reader on fire")
    html = page(admin_client, f"/console/executions/{pk}")
    rows = re.search(r'<tbody id="task-charge" data-path="charge">(.*?)</tbody>', html, re.S).group(1)
    first, second = re.findall(r"<tr .*?</tr>", rows, re.S)
    assert 'data-status="FAILED"' in first and "w-7" in first and "card reader on fire" in first
    assert "2.50 s" in first  # it ran from its lease to its failure
    assert 'data-status="SCHEDULED"' in second
    assert 'data-control="retryBackoff"' in second  # the retry waits out its delay: blockedBy
    assert nodes(html)["charge"]["status"] == "SCHEDULED"
    assert "2 attempts" in nodes(html)["charge"]["body"]
    assert "c-9" in html


def test_a_running_execution_refreshes_itself_and_an_ended_one_does_not(admin_client, api):
    (pk,) = fill(api, "charge", 1)
    running = page(admin_client, f"/console/executions/{pk}")
    assert re.search(r'<div id="live" data-status="RUNNING" data-refresh-seconds="2">', running)
    assert '<meta http-equiv="refresh" content="2">' in running  # without JavaScript
    assert '<script src="/static/console/console.js" defer>' in running
    complete(api, poll_one(api, "charge"))
    done = page(admin_client, f"/console/executions/{pk}")
    assert '<div id="live" data-status="COMPLETED">' in done
    assert "http-equiv" not in done
    assert nodes(done)["t"]["fill"] == graph.STATUS_COLOURS["COMPLETED"]


def test_the_page_shows_why_an_execution_failed(admin_client, api):
    task_def(api, "charge", retryCount=0)
    register(api, "pay", simple("charge"))
    pk = start(api, "pay")["id"]
    fail(api, poll_one(api, "charge"), "declined", terminal=True)
    html = page(admin_client, f"/console/executions/{pk}")
    assert 'data-status="FAILED"' in re.search(r'<span id="execution-status">(.*?)</span></h1>', html, re.S).group(1)
    assert "declined" in re.search(r'<dd class="error" id="execution-reason">(.*?)</dd>', html, re.S).group(1)
    assert nodes(html)["charge"]["fill"] == graph.STATUS_COLOURS["FAILED_WITH_TERMINAL_ERROR"]


def test_a_sub_workflow_node_links_to_the_child_and_the_child_to_its_parent(admin_client, api):
    task_def(api, "inner")
    register(api, "child", simple("inner"))
    register(
        api,
        "parent",
        {"name": "child", "taskReferenceName": "sub", "type": "SUB_WORKFLOW", "subWorkflowParam": {"name": "child"}},
    )
    pk = start(api, "parent")["id"]
    sweep()
    child_id = task_at(execution(api, pk), "sub")["subWorkflowId"]
    assert child_id
    parent_html = page(admin_client, f"/console/executions/{pk}")
    assert f'<a href="/console/executions/{child_id}">' in nodes(parent_html)["sub"]["body"]
    child_html = page(admin_client, f"/console/executions/{child_id}")
    assert re.search(rf'<a id="parent-link" href="/console/executions/{pk}">', child_html)
    assert nodes(child_html)["sub.inner"]["status"] == "SCHEDULED"  # the child's own rows, by its prefix
    assert nodes(parent_html)["sub"]["status"] == "IN_PROGRESS"


def test_the_legend_names_every_status_in_its_colour(admin_client, api):
    (pk,) = fill(api, "charge", 1)
    html = page(admin_client, f"/console/executions/{pk}")
    legend = re.search(r'<ul class="legend" id="legend">(.*?)</ul>', html, re.S).group(1)
    for status, colour in graph.STATUS_COLOURS.items():
        assert re.search(rf'<li data-status="{status}">.*?fill="{colour}"', legend, re.S), status


def test_every_status_has_its_own_colour():
    statuses = {*TaskStatus.values, graph.NOT_STARTED}
    assert set(graph.STATUS_COLOURS) == statuses
    assert len(set(graph.STATUS_COLOURS.values())) == len(statuses)
    assert set(graph.EXECUTION_COLOURS) == set(ExecutionStatus.values)
    assert len(set(graph.EXECUTION_COLOURS.values())) == len(ExecutionStatus.values)
    for colour in (*graph.STATUS_COLOURS.values(), *graph.EXECUTION_COLOURS.values()):
        assert re.fullmatch(r"#[0-9a-f]{6}", colour)


# --- controls of a namespace ------------------------------------------------------------


def test_the_controls_page_shows_queues_workers_semaphores_windows_and_breakers(admin_client, api, frozen_clock):
    api.put("semaphores/erp", {"permits": 2})
    fill(api, "export", 3, semaphores=["erp"], concurrentExecLimit=5)
    fill(api, "partner", 2, rateLimitPerFrequency=1, rateLimitFrequencySeconds=60)
    api.put("quotas", {"maxExecutionsPerMinute": 100})
    start(api, "wf_partner", {"i": 9})  # counted in the minute's starts
    leased = poll(api, "export", count=3, worker="w-export")
    assert len(leased) == 2  # the semaphore's two permits
    poll(api, "partner", worker="w-partner")
    _open_a_breaker("api.partner.example")
    clock.advance(4)

    html = page(admin_client, "/console/ns/default/controls")
    export = _row(html, 'data-queue="export"')
    assert '<td class="num depth">1</td>' in export and '<td class="num in-flight">2</td>' in export
    assert "<code>concurrentExecLimit</code> 2/5" in export and "<code>semaphore:erp</code> 2/2" in export
    assert '<span class="error"><code>semaphore:erp</code>' in export  # what holds the third back
    assert "4.00 s ago" in export
    partner = _row(html, 'data-queue="partner"')
    assert "<code>rateLimit</code> 1/1" in partner and "until 12:01:00" in partner
    assert "w-export" in _row(html, 'data-worker="w-export"')
    erp = _row(html, 'data-semaphore="erp"')
    assert "2/2" in erp and erp.count('class="holder"') == 2 and "w-export" in erp
    assert "1/1" in _row(html, 'data-window="partner"')
    assert "1/100" in _row(html, 'data-window="@starts"')
    breaker = _row(html, 'data-breaker="api.partner.example"')
    assert '<td class="breaker-OPEN">OPEN</td>' in breaker and "4/4" in breaker


def test_the_controls_page_of_an_empty_namespace(admin_client):
    Namespace.objects.create(name="quiet")
    html = page(admin_client, "/console/ns/quiet/controls")
    for empty in ("No queues.", "No worker has polled.", "No semaphores configured.", "No breaker reported lately"):
        assert empty in html


def _row(html: str, marker: str) -> str:
    found = re.search(rf"<tr {marker}[^>]*>(.*?)</tr>", html, re.S)
    assert found, marker
    return found.group(1)


def _open_a_breaker(key: str) -> None:
    """Four failed calls through this process's breakers, reported as the
    system-task runner would."""
    namespace_id = Namespace.objects.get(name="default").id
    breakers.configure({"enabled": True, "minimumRequests": 4, "failureRatio": 0.5})
    try:
        for _ in range(4):
            breakers.registry().acquire(key, namespace_id).release(True)
        assert breakers.report() == 1
    finally:
        breakers.configure()


# --- the graph's layout ---------------------------------------------------------------------


def _t(ref: str, kind: str = "SIMPLE", **fields) -> dict:
    return {"name": fields.pop("name", ref), "taskReferenceName": ref, "type": kind, **fields}


def _row_view(path: str, status: str, **fields) -> dict:
    ref = path.rsplit(".", 1)[-1].split("[")[0]
    return {
        "path": path,
        "referenceTaskName": ref,
        "status": status,
        "outputData": fields.pop("output", {}),
        "subWorkflowId": None,
        "blockedBy": None,
        "reasonForIncompletion": None,
        **fields,
    }


def _overlaps(a: graph.Node, b: graph.Node) -> bool:
    return a.x < b.x + b.w and b.x < a.x + a.w and a.y < b.y + b.h and b.y < a.y + a.h


def _sound(laid: graph.Graph) -> None:
    """No two nodes overlap, and everything is inside the drawing."""
    for index, node in enumerate(laid.nodes):
        assert node.x >= 0 and node.x + node.w <= laid.width and node.y >= 0 and node.y + node.h <= laid.height
        for other in laid.nodes[index + 1 :]:
            assert not _overlaps(node, other), (node.key, other.key)
    for edge in laid.edges:
        for x, y in edge.points:
            assert 0 <= x <= laid.width and 0 <= y <= laid.height


def _edges_between(laid: graph.Graph, upper: str, lower: str) -> list[graph.Edge]:
    a, b = laid.node(upper), laid.node(lower)
    return [e for e in laid.edges if e.points[0] == (a.cx, a.y + a.h) and e.points[-1] == (b.cx, b.y)]


FORK = {
    "tasks": [
        _t("prepare"),
        _t("fork", "FORK_JOIN", forkTasks=[[_t("a1"), _t("a2")], [_t("b1")], [_t("c1")]]),
        _t("join", "JOIN", joinOn=["a2", "b1", "c1"]),
        _t("finish"),
    ]
}


def test_a_fork_puts_its_branches_side_by_side_and_joins_them():
    laid = graph.layout(
        FORK,
        [
            _row_view("prepare", "COMPLETED"),
            _row_view("fork", "IN_PROGRESS"),
            _row_view("a1", "COMPLETED"),
            _row_view("a2", "IN_PROGRESS"),
            _row_view("b1", "FAILED"),
        ],
    )
    _sound(laid)
    a1, b1, c1 = laid.node("a1"), laid.node("b1"), laid.node("c1")
    assert a1.y == b1.y == c1.y > laid.node("fork").y
    assert a1.x < b1.x < c1.x
    assert laid.node("a2").y > a1.y and laid.node("a2").x == a1.x
    assert laid.node("join").y > laid.node("a2").y
    for first in ("a1", "b1", "c1"):
        assert len(_edges_between(laid, "fork", first)) == 1
    for last in ("a2", "b1", "c1"):
        assert len(_edges_between(laid, last, "join")) == 1
    assert len(_edges_between(laid, "join", "finish")) == 1
    assert [laid.node(k).status for k in ("prepare", "fork", "a1", "a2", "b1", "c1", "join")] == [
        "COMPLETED",
        "IN_PROGRESS",
        "COMPLETED",
        "IN_PROGRESS",
        "FAILED",
        graph.NOT_STARTED,
        graph.NOT_STARTED,
    ]
    assert laid.node("c1").fill == graph.STATUS_COLOURS[graph.NOT_STARTED]


LOOP = {
    "tasks": [
        _t("loop", "DO_WHILE", loopCondition="$.iteration < 3", maxIterations=5, loopOver=[_t("step"), _t("check")]),
        _t("after"),
    ]
}


def test_a_loop_frames_its_body_with_a_back_edge_and_shows_the_latest_iteration():
    rows = [
        _row_view("loop", "IN_PROGRESS", output={"iteration": 2}),
        _row_view("loop[1].step", "COMPLETED"),
        _row_view("loop[1].check", "COMPLETED"),
        _row_view("loop[2].step", "FAILED", attempt=1),
        _row_view("loop[2].step", "IN_PROGRESS", attempt=2),
    ]
    laid = graph.layout(LOOP, rows)
    _sound(laid)
    (frame,) = laid.frames
    assert frame.label == "iteration 2"
    for key in ("loop.step", "loop.check"):
        node = laid.node(key)
        assert frame.x < node.x and node.x + node.w < frame.x + frame.w
        assert frame.y < node.y and node.y + node.h < frame.y + frame.h
    loop = laid.node("loop")
    (back,) = [edge for edge in laid.edges if edge.back]
    assert back.points[-1] == (loop.x + loop.w, loop.y + loop.h / 2)
    assert laid.node("after").y > frame.y + frame.h
    step = laid.node("loop.step")
    assert (step.status, step.runs, step.attempts) == ("IN_PROGRESS", 2, 3)
    assert step.caption == "step · ×2 · 3 attempts"
    assert laid.node("loop.check").status == "COMPLETED"


SWITCH = {
    "tasks": [
        _t(
            "route",
            "SWITCH",
            evaluatorType="value-param",
            expression="kind",
            inputParameters={"kind": "x"},
            decisionCases={"card": [_t("charge"), _t("receipt")], "bank": [_t("transfer")]},
            defaultCase=[],
        ),
        _t("notify"),
    ]
}


def test_a_switch_labels_its_cases_and_dims_the_ones_not_taken():
    laid = graph.layout(
        SWITCH,
        [
            _row_view("route", "COMPLETED", output={"selectedCase": "card", "branch": "card"}),
            _row_view("charge", "COMPLETED"),
            _row_view("receipt", "SCHEDULED"),
        ],
    )
    _sound(laid)
    heads = [edge for edge in laid.edges if edge.label]
    assert [edge.label for edge in heads] == ["card", "bank", "default"]
    assert [edge.untaken for edge in heads] == [False, True, True]
    assert not laid.node("charge").untaken and not laid.node("receipt").untaken
    assert laid.node("transfer").untaken and laid.node("transfer").status == graph.NOT_STARTED
    assert laid.node("charge").y == laid.node("transfer").y
    notify = laid.node("notify")
    ends = {edge.points[0] for edge in laid.edges if edge.points[-1] == (notify.cx, notify.y)}
    receipt, transfer = laid.node("receipt"), laid.node("transfer")
    assert (receipt.cx, receipt.y + receipt.h) in ends and (transfer.cx, transfer.y + transfer.h) in ends
    assert len(ends) == 3  # and the empty default case passes straight through
    before = graph.layout(SWITCH, [])
    assert not any(node.untaken for node in before.nodes)  # nothing is dimmed before the switch decides


def test_a_sub_workflow_node_carries_its_child_and_a_dynamic_fork_sums_up_its_items():
    body = {
        "tasks": [
            _t(
                "fan",
                "FORK_JOIN_DYNAMIC",
                inputParameters={"items": []},
                forkTask=_t("sub", "SUB_WORKFLOW", subWorkflowParam={"name": "child", "version": 1}),
            ),
            _t("join", "JOIN"),
        ]
    }
    rows = [
        _row_view("fan", "IN_PROGRESS", output={"items": 3}),
        _row_view("fan[0].sub", "COMPLETED", subWorkflowId="c0"),
        _row_view("fan[1].sub", "FAILED", subWorkflowId="c1"),
        _row_view("fan[2].sub", "IN_PROGRESS", subWorkflowId="c2"),
    ]
    laid = graph.layout(body, rows)
    _sound(laid)
    sub = laid.node("fan.sub")
    assert (sub.status, sub.runs, sub.child_id) == ("IN_PROGRESS", 3, "c2")
    assert laid.frames[0].label == "for each of 3 items"
    assert graph.summary_status(["COMPLETED", "FAILED", "CANCELED"]) == "FAILED"
    assert graph.summary_status(["COMPLETED", "SKIPPED"]) == "COMPLETED"
    assert graph.summary_status([]) == graph.NOT_STARTED


def test_a_child_execution_is_drawn_from_its_own_workflow_with_its_prefix():
    body = {"tasks": [_t("inner")]}
    laid = graph.layout(body, [_row_view("outer[2].sub.inner", "TIMED_OUT")], path_prefix="outer[2].sub.")
    assert laid.node("outer.sub.inner").status == "TIMED_OUT"
    assert laid.node("outer.sub.inner").text == "#111111"


def test_nested_structures_never_overlap():
    body = {
        "tasks": [
            _t(
                "fork",
                "FORK_JOIN",
                forkTasks=[
                    [
                        _t(
                            "loop",
                            "DO_WHILE",
                            loopCondition="false",
                            maxIterations=2,
                            loopOver=[
                                _t(
                                    "route",
                                    "SWITCH",
                                    evaluatorType="value-param",
                                    expression="k",
                                    inputParameters={"k": 1},
                                    decisionCases={"1": [_t("one")], "2": [_t("two"), _t("twob")]},
                                    defaultCase=[_t("other")],
                                )
                            ],
                        )
                    ],
                    [_t("fan", "FORK_JOIN_DYNAMIC", inputParameters={"items": []}, forkTask=_t("item"))],
                    [_t("a_very_long_reference_name_that_is_cut_short")],
                ],
            ),
            _t("join", "JOIN"),
        ]
    }
    laid = graph.layout(body, [])
    _sound(laid)
    assert len(laid.nodes) == 11 and len(laid.frames) == 2
    assert laid.node("a_very_long_reference_name_that_is_cut_short").label.endswith("…")


def test_the_page_draws_a_real_workflow(admin_client, api):
    for name in ("a", "b", "c"):
        task_def(api, name)
    register(
        api,
        "shape",
        _t("fork", "FORK_JOIN", forkTasks=[[_t("a")], [_t("b")]]),
        _t("join", "JOIN"),
        _t("loop", "DO_WHILE", loopCondition="$.iteration < 2", maxIterations=3, loopOver=[_t("c")]),
    )
    pk = start(api, "shape")["id"]
    complete(api, poll_one(api, "a"))
    drawn = nodes(page(admin_client, f"/console/executions/{pk}"))
    assert {key: node["status"] for key, node in drawn.items()} == {
        "fork": "IN_PROGRESS",
        "a": "COMPLETED",
        "b": "SCHEDULED",
        "join": graph.NOT_STARTED,
        "loop": graph.NOT_STARTED,
        "loop.c": graph.NOT_STARTED,
    }
    assert all(node["fill"] == graph.STATUS_COLOURS[node["status"]] for node in drawn.values())
    complete(api, poll_one(api, "b"))
    complete(api, poll_one(api, "c"))
    complete(api, poll_one(api, "c"))
    sweep()
    assert execution(api, pk)["status"] == "COMPLETED"
    html = page(admin_client, f"/console/executions/{pk}")
    assert all(node["status"] == "COMPLETED" for node in nodes(html).values())
    assert "iteration 2" in html
