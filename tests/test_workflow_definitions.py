"""Workflow definitions through the API (SPEC §4): versions, publish, rollback,
baked snapshots, sub-workflow checks, and the static limits as 400s."""

from __future__ import annotations

from typing import Any

import pytest

from metadata.models import WorkflowDefinition, WorkflowSnapshot, WorkflowVersion

URL = "metadata/workflow-definitions"


def simple(ref: str, **extra: Any) -> dict:
    return {"name": "work", "taskReferenceName": ref, **extra}


def sub(ref: str, child: str, version: int | None = None) -> dict:
    param: dict = {"name": child} if version is None else {"name": child, "version": version}
    return {"name": "call", "taskReferenceName": ref, "type": "SUB_WORKFLOW", "subWorkflowParam": param}


def workflow(name: str, *tasks: dict, **fields: Any) -> dict:
    return {"name": name, "tasks": list(tasks) or [simple("only")], **fields}


def register(api, body: dict) -> dict:
    response = api.post(URL, body)
    assert response.status_code == 201, response.json()
    return response.json()


def leaf(api, name: str, ref: str = "only") -> dict:
    return register(api, workflow(name, simple(ref)))


def snapshot_of(name: str, version: int) -> WorkflowSnapshot:
    return WorkflowVersion.objects.select_related("snapshot").get(definition__name=name, version=version).snapshot


def published_version(api, name: str) -> int:
    response = api.get(f"{URL}/{name}")
    assert response.status_code == 200
    return response.json()["version"]


def assert_error(response, status: int, field: str | None = None) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) >= {"error", "message"}
    if field is not None:
        assert body["field"] == field, body
    return body


# --- registering ------------------------------------------------------------


def test_it_registers_json_as_published_version_1(api):
    response = api.post(URL, workflow("orders", simple("charge"), description="take money"))
    assert response.status_code == 201
    body = response.json()
    assert body["name"] == "orders"
    assert body["version"] == 1
    assert body["published"] is True
    assert body["publishedAt"] is not None and body["createdAt"]
    assert body["description"] == "take money"
    assert body["tasks"] == [
        {"name": "work", "taskReferenceName": "charge", "type": "SIMPLE", "inputParameters": {}, "optional": False}
    ]
    assert body["timeoutPolicy"] == "TIME_OUT_WF" and body["timeoutSeconds"] == 0
    assert WorkflowSnapshot.objects.filter(name="orders", version=1).count() == 1


YAML_BODY = """\
name: from_yaml
description: written by hand
inputParameters: [orderId]
tasks:
  - name: work
    taskReferenceName: charge
    inputParameters:
      id: ${workflow.input.orderId}
  - name: fan
    taskReferenceName: fan
    type: FORK_JOIN
    maxConcurrency: 2
    forkTasks:
      - - name: work
          taskReferenceName: left
      - - name: work
          taskReferenceName: right
  - name: join
    taskReferenceName: join
    type: JOIN
    joinOn: [left, right]
  - name: pause
    taskReferenceName: pause
    type: WAIT
    inputParameters:
      until: "2026-12-01T09:00:00Z"
"""


@pytest.mark.parametrize("content_type", ["application/yaml", "application/yaml; charset=utf-8"])
def test_it_registers_yaml(api, content_type):
    response = api.post(URL, raw=YAML_BODY, content_type=content_type)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["name"], body["version"], body["published"]) == ("from_yaml", 1, True)
    assert body["tasks"][0]["inputParameters"] == {"id": "${workflow.input.orderId}"}
    assert body["tasks"][1]["forkTasks"][1][0]["taskReferenceName"] == "right"
    assert body["inputParameters"] == ["orderId"]


def test_it_stores_the_same_definition_from_yaml_and_json(api):
    from_yaml = api.post(URL, raw=YAML_BODY, content_type="application/yaml").json()
    refetched = api.get(f"{URL}/from_yaml").json()
    again = register(api, refetched)  # a GET body can be posted back as is
    drop = {"version", "published", "createdAt", "publishedAt"}
    assert {k: v for k, v in again.items() if k not in drop} == {k: v for k, v in from_yaml.items() if k not in drop}
    assert again["version"] == 2


BAD_YAML = [
    ("syntax", "name: x\ntasks: [\n", None),
    ("bad indentation", "name: x\n  tasks:\n - a: b\n c: d\n", None),
    ("tab indent", "name: x\ntasks:\n\t- name: a\n", None),
    ("a scalar", "just words", "body"),
    ("a list", "- name: x\n", "body"),
    ("empty", "", "name"),
    ("python tag", "name: !!python/object/apply:os.system ['true']\ntasks: []\n", None),
    (
        "unquoted timestamp",
        "name: y\ntasks:\n  - {name: w, taskReferenceName: w, type: WAIT, "
        "inputParameters: {until: 2026-12-01T09:00:00Z}}\n",
        "tasks[0].inputParameters.until",
    ),
    (
        "date in inputs",
        "name: y\ntasks:\n  - {name: w, taskReferenceName: w, inputParameters: {day: 2026-12-01}}\n",
        "tasks[0].inputParameters.day",
    ),
    (
        "nan in inputs",
        "name: y\ntasks:\n  - {name: w, taskReferenceName: w, inputParameters: {n: .nan}}\n",
        "tasks[0].inputParameters.n",
    ),
    ("inf in variables", "name: y\nvariables: {n: .inf}\ntasks:\n  - {name: w, taskReferenceName: w}\n", "variables.n"),
    (
        "date key",
        "name: y\ntasks:\n  - {name: w, taskReferenceName: w, inputParameters: {m: {2026-01-01: x}}}\n",
        "tasks[0].inputParameters.m",
    ),
]


@pytest.mark.parametrize("text,field", [c[1:] for c in BAD_YAML], ids=[c[0] for c in BAD_YAML])
def test_it_rejects_bad_yaml_with_400(api, text, field):
    response = api.post(URL, raw=text, content_type="application/yaml")
    body = assert_error(response, 400, field)
    if field is None:
        assert body["error"] == "MALFORMED_REQUEST"
    assert not WorkflowDefinition.objects.exists()


@pytest.mark.parametrize(
    "raw,content_type",
    [
        ('[{"name": "x"}]', "application/json"),
        ('"orders"', "application/json"),
        ("42", "application/json"),
        ("null", "application/json"),
        ("true", "application/json"),
        ("{not json", "application/json"),
        ('{"name": "x", "tasks": [}', "application/json"),
        ('{"name": "x", "tasks": NaN}', "application/json"),
        ("name=x&tasks=y", "application/x-www-form-urlencoded"),
    ],
)
def test_it_rejects_wrong_bodies_with_400(api, raw, content_type):
    assert_error(api.post(URL, raw=raw, content_type=content_type), 400)
    assert not WorkflowDefinition.objects.exists()


def test_it_rejects_an_unknown_content_type_with_415(api):
    response = api.post(URL, raw="<xml/>", content_type="application/xml")
    assert_error(response, 415)


def test_it_survives_deeply_nested_input_values(api):
    value: Any = "leaf"
    for _ in range(500):
        value = {"v": [value]}
    response = api.post(URL, workflow("deep_values", simple("a", inputParameters={"x": value})))
    assert response.status_code in (201, 400), response.content


@pytest.mark.parametrize("role,status", [("admin", 201), ("developer", 201), ("worker", 403)])
def test_it_lets_admins_and_developers_register(api_for, role, status):
    response = api_for(role).post(URL, workflow("by_role"))
    assert response.status_code == status


def test_it_refuses_a_request_without_a_key(db):
    from tests.conftest import Api

    assert Api(None).post(URL, workflow("anon")).status_code == 401


# --- versions and drafts ----------------------------------------------------


def test_it_stores_a_second_post_as_a_draft(api):
    register(api, workflow("orders", simple("v1")))
    second = register(api, workflow("orders", simple("v2")))
    assert (second["version"], second["published"], second["publishedAt"]) == (2, False, None)

    current = api.get(f"{URL}/orders").json()
    assert current["version"] == 1 and current["tasks"][0]["taskReferenceName"] == "v1"
    # A draft is not baked: only version 1 has a snapshot.
    assert WorkflowSnapshot.objects.filter(name="orders").count() == 1
    assert snapshot_of("orders", 2) is None


def test_it_lists_versions_with_published_flags(api):
    register(api, workflow("orders", description="first"))
    register(api, workflow("orders", description="second"))
    versions = api.get(f"{URL}/orders/versions").json()
    assert [(v["version"], v["published"], v["description"]) for v in versions] == [
        (1, True, "first"),
        (2, False, "second"),
    ]
    assert versions[0]["publishedAt"] is not None and versions[1]["publishedAt"] is None


def test_it_shows_any_version(api):
    register(api, workflow("orders", simple("v1")))
    register(api, workflow("orders", simple("v2")))
    body = api.get(f"{URL}/orders/versions/2").json()
    assert (body["version"], body["published"], body["tasks"][0]["taskReferenceName"]) == (2, False, "v2")
    assert api.get(f"{URL}/orders/versions/1").json()["published"] is True


@pytest.mark.parametrize(
    "path", ["orders/versions/3", "ghost", "ghost/versions", "ghost/versions/1", "orders/versions/0"]
)
def test_it_answers_404_for_unknown_names_and_versions(api, path):
    register(api, workflow("orders"))
    register(api, workflow("orders"))
    assert_error(api.get(f"{URL}/{path}"), 404)


def test_it_lists_only_published_versions(api):
    register(api, workflow("b_flow", description="b1"))
    register(api, workflow("a_flow", description="a1"))
    register(api, workflow("a_flow", description="a2 draft"))
    listed = api.get(URL).json()
    assert [(row["name"], row["version"], row["description"]) for row in listed] == [
        ("a_flow", 1, "a1"),
        ("b_flow", 1, "b1"),
    ]


def test_it_keeps_namespaces_apart(api_for):
    mine, theirs = api_for("admin", "default"), api_for("admin", "other")
    register(mine, workflow("shared_name"))
    assert register(theirs, workflow("shared_name"))["version"] == 1
    # A child in another namespace does not exist here.
    register(mine, workflow("only_in_default"))
    response = theirs.post(URL, workflow("parent", sub("call_it", "only_in_default")))
    assert_error(response, 400, "tasks[0].subWorkflowParam")
    assert_error(theirs.get(f"{URL}/only_in_default"), 404)


# --- publish ----------------------------------------------------------------


def test_it_publishes_the_latest_version_by_default(api):
    register(api, workflow("orders", simple("v1")))
    register(api, workflow("orders", simple("v2")))
    response = api.post(f"{URL}/orders/publish")
    assert response.status_code == 200
    assert (response.json()["version"], response.json()["published"]) == (2, True)
    assert published_version(api, "orders") == 2
    assert [v["published"] for v in api.get(f"{URL}/orders/versions").json()] == [False, True]


def test_it_publishes_a_named_version(api):
    register(api, workflow("orders"))
    register(api, workflow("orders"))
    api.post(f"{URL}/orders/publish")
    response = api.post(f"{URL}/orders/publish", {"version": 1})
    assert response.status_code == 200 and response.json()["version"] == 1
    assert published_version(api, "orders") == 1


def test_it_bakes_a_new_snapshot_on_every_publish(api):
    register(api, workflow("orders"))
    register(api, workflow("orders"))
    assert WorkflowSnapshot.objects.filter(name="orders").count() == 1
    api.post(f"{URL}/orders/publish", {"version": 2})
    assert WorkflowSnapshot.objects.filter(name="orders").count() == 2
    first = snapshot_of("orders", 1).pk
    api.post(f"{URL}/orders/publish", {"version": 1})
    assert WorkflowSnapshot.objects.filter(name="orders").count() == 3
    assert snapshot_of("orders", 1).pk != first


PUBLISH_BODIES = [
    ({"version": "x"}, "version"),
    ({"version": "1"}, "version"),
    ({"version": 0}, "version"),
    ({"version": -1}, "version"),
    ({"version": True}, "version"),
    ({"version": 1.5}, "version"),
    ({"version": [1]}, "version"),
    ({"versoin": 1}, "versoin"),
]


@pytest.mark.parametrize("action", ["publish", "rollback"])
@pytest.mark.parametrize("choice,field", PUBLISH_BODIES, ids=lambda v: str(v))
def test_it_rejects_bad_version_choices(api, action, choice, field):
    register(api, workflow("orders"))
    assert_error(api.post(f"{URL}/orders/{action}", choice), 400, field)


@pytest.mark.parametrize("action", ["publish", "rollback"])
@pytest.mark.parametrize("raw", ['["x"]', '"x"', "7", "{bad"])
def test_it_rejects_non_object_version_choices(api, action, raw):
    register(api, workflow("orders"))
    register(api, workflow("orders"))
    assert_error(api.post(f"{URL}/orders/{action}", raw=raw), 400)
    assert published_version(api, "orders") == 1


@pytest.mark.parametrize("action", ["publish", "rollback"])
def test_it_answers_404_for_unknown_versions_and_names(api, action):
    register(api, workflow("orders"))
    assert_error(api.post(f"{URL}/orders/{action}", {"version": 9}), 404)
    assert_error(api.post(f"{URL}/orders/{action}", {"version": 2**40}), 404)
    assert_error(api.post(f"{URL}/ghost/{action}", {"version": 1}), 404)
    assert published_version(api, "orders") == 1


# --- rollback ---------------------------------------------------------------


def test_it_rolls_back_to_the_exact_snapshot_baked_earlier(api):
    leaf(api, "child", "c1")
    register(api, workflow("parent", sub("call", "child")))
    baked = snapshot_of("parent", 1)
    assert baked.body["workflows"]["parent@1"]["tasks"][0]["subWorkflowParam"] == {"name": "child", "version": 1}

    leaf(api, "child", "c2")
    api.post(f"{URL}/child/publish")
    register(api, workflow("parent", sub("call", "child"), description="v2"))
    api.post(f"{URL}/parent/publish")
    assert "child@2" in snapshot_of("parent", 2).body["workflows"]
    count = WorkflowSnapshot.objects.count()

    response = api.post(f"{URL}/parent/rollback", {"version": 1})
    assert response.status_code == 200
    assert (response.json()["version"], response.json()["published"]) == (1, True)
    assert WorkflowSnapshot.objects.count() == count  # rollback bakes nothing
    restored = snapshot_of("parent", 1)
    assert restored.pk == baked.pk and restored.body == baked.body
    assert "child@1" in restored.body["workflows"] and "child@2" not in restored.body["workflows"]
    assert published_version(api, "parent") == 1


def test_it_rolls_back_to_the_previous_published_version_by_default(api):
    for _ in range(3):
        register(api, workflow("orders"))
    api.post(f"{URL}/orders/publish", {"version": 2})
    api.post(f"{URL}/orders/publish", {"version": 3})
    count = WorkflowSnapshot.objects.count()

    assert api.post(f"{URL}/orders/rollback").json()["version"] == 2
    assert api.post(f"{URL}/orders/rollback").json()["version"] == 1
    assert_error(api.post(f"{URL}/orders/rollback"), 409)
    assert published_version(api, "orders") == 1
    assert WorkflowSnapshot.objects.count() == count


def test_it_skips_never_published_versions_when_rolling_back_by_default(api):
    for _ in range(3):
        register(api, workflow("orders"))
    api.post(f"{URL}/orders/publish", {"version": 3})
    assert api.post(f"{URL}/orders/rollback").json()["version"] == 1


def test_it_refuses_to_roll_back_to_a_never_published_version(api):
    register(api, workflow("orders"))
    register(api, workflow("orders"))
    body = assert_error(api.post(f"{URL}/orders/rollback", {"version": 2}), 409)
    assert body["error"] == "CONFLICT" and "never published" in body["message"]
    assert published_version(api, "orders") == 1


def test_it_refuses_a_default_rollback_with_nothing_earlier(api):
    register(api, workflow("orders"))
    assert_error(api.post(f"{URL}/orders/rollback"), 409)


def test_it_can_roll_forward_to_a_later_published_version(api):
    register(api, workflow("orders"))
    register(api, workflow("orders"))
    api.post(f"{URL}/orders/publish")
    api.post(f"{URL}/orders/rollback", {"version": 1})
    assert api.post(f"{URL}/orders/rollback", {"version": 2}).json()["version"] == 2


# --- sub-workflows and baking ----------------------------------------------


@pytest.mark.parametrize(
    "tasks,field",
    [
        ([sub("call", "ghost")], "tasks[0].subWorkflowParam"),
        ([simple("a"), sub("call", "ghost")], "tasks[1].subWorkflowParam"),
        ([simple("a"), sub("call", "child", version=7)], "tasks[1].subWorkflowParam"),
        (
            [
                {
                    "name": "f",
                    "taskReferenceName": "f",
                    "type": "FORK_JOIN",
                    "forkTasks": [[simple("x")], [sub("call", "ghost")]],
                }
            ],
            "tasks[0].forkTasks[1][0].subWorkflowParam",
        ),
    ],
    ids=["unknown", "second task", "unknown version", "nested"],
)
def test_it_rejects_an_unknown_sub_workflow(api, tasks, field):
    leaf(api, "child")
    body = assert_error(api.post(URL, workflow("parent", *tasks)), 400, field)
    assert body["taskReferenceName"] == "call"
    assert not WorkflowDefinition.objects.filter(name="parent").exists()


def test_it_pins_the_childs_published_version_in_the_snapshot(api):
    leaf(api, "child", "c1")
    leaf(api, "child", "c2")  # a draft: not what a parent gets
    register(api, workflow("parent", sub("call", "child")))
    body = snapshot_of("parent", 1).body
    assert body["root"] == "parent@1"
    assert set(body["workflows"]) == {"parent@1", "child@1"}
    assert body["workflows"]["child@1"]["tasks"][0]["taskReferenceName"] == "c1"
    assert body["workflows"]["parent@1"]["tasks"][0]["subWorkflowParam"]["version"] == 1
    # The stored version body keeps what the author wrote.
    assert api.get(f"{URL}/parent").json()["tasks"][0]["subWorkflowParam"] == {"name": "child", "version": None}


def test_it_pins_an_explicit_child_version(api):
    leaf(api, "child", "c1")
    leaf(api, "child", "c2")
    register(api, workflow("parent", sub("call", "child", version=2)))
    assert snapshot_of("parent", 1).body["workflows"]["child@2"]["tasks"][0]["taskReferenceName"] == "c2"


def test_it_never_changes_a_baked_snapshot_when_children_change(api):
    leaf(api, "grandchild", "g1")
    register(api, workflow("child", sub("call_g", "grandchild")))
    register(api, workflow("parent", sub("call_c", "child")))
    before = {row.pk: row.body for row in WorkflowSnapshot.objects.all()}
    parent_snapshot = snapshot_of("parent", 1)

    leaf(api, "grandchild", "g2")
    api.post(f"{URL}/grandchild/publish")
    register(api, workflow("child", sub("call_g", "grandchild"), simple("extra")))
    api.post(f"{URL}/child/publish")
    api.post(f"{URL}/child/rollback", {"version": 1})
    api.delete(f"{URL}/grandchild")

    after = {row.pk: row.body for row in WorkflowSnapshot.objects.filter(pk__in=before)}
    assert after == before
    assert snapshot_of("parent", 1).pk == parent_snapshot.pk
    assert set(parent_snapshot.body["workflows"]) == {"parent@1", "child@1", "grandchild@1"}


def test_it_bakes_current_children_when_publishing_again(api):
    leaf(api, "child", "c1")
    register(api, workflow("parent", sub("call", "child")))
    leaf(api, "child", "c2")
    api.post(f"{URL}/child/publish")
    api.post(f"{URL}/parent/publish", {"version": 1})
    assert set(snapshot_of("parent", 1).body["workflows"]) == {"parent@1", "child@2"}


def test_it_bakes_a_child_called_twice_once(api):
    leaf(api, "child")
    register(api, workflow("parent", sub("one", "child"), sub("two", "child")))
    assert set(snapshot_of("parent", 1).body["workflows"]) == {"parent@1", "child@1"}


def test_it_rejects_a_sub_workflow_cycle(api):
    leaf(api, "b")
    register(api, workflow("a", sub("call_b", "b")))
    response = api.post(URL, workflow("b", sub("call_a", "a")))
    body = assert_error(response, 400)
    assert "cycle" in body["message"] and "b → a → b" in body["message"]
    assert body["field"].endswith("subWorkflowParam.name")
    assert [v["version"] for v in api.get(f"{URL}/b/versions").json()] == [1]


def test_it_rejects_a_workflow_calling_itself(api):
    leaf(api, "self_caller")
    body = assert_error(
        api.post(URL, workflow("self_caller", sub("me", "self_caller"))), 400, "tasks[0].subWorkflowParam.name"
    )
    assert "cycle" in body["message"] and body["taskReferenceName"] == "me"


def test_it_rejects_a_cycle_that_appears_only_at_publish(api):
    leaf(api, "a")
    leaf(api, "c")
    register(api, workflow("b", sub("call_c", "c")))
    register(api, workflow("a", sub("call_b", "b")))  # draft a@2 → b → c@1: fine
    register(api, workflow("c", sub("call_a", "a")))  # draft c@2 → a@1 (a leaf): fine
    assert api.post(f"{URL}/c/publish").status_code == 200
    snapshots = WorkflowSnapshot.objects.count()

    body = assert_error(api.post(f"{URL}/a/publish"), 400)  # a@2 → b → c@2 → a
    assert "a → b → c → a" in body["message"]
    assert published_version(api, "a") == 1
    assert WorkflowSnapshot.objects.count() == snapshots


def _chain(api, names: list[str]) -> None:
    """names[-1] is a leaf; each earlier name calls the next one."""
    leaf(api, names[-1])
    for name, child in zip(reversed(names[:-1]), reversed(names[1:]), strict=False):
        register(api, workflow(name, sub(f"to_{child}", child)))


def test_it_accepts_a_static_chain_of_depth_4(api):
    _chain(api, ["root", "c1", "c2", "c3", "c4"])
    assert set(snapshot_of("root", 1).body["workflows"]) == {"root@1", "c1@1", "c2@1", "c3@1", "c4@1"}


def test_it_rejects_a_static_chain_deeper_than_4(api):
    _chain(api, ["root", "c1", "c2", "c3", "c4"])
    body = assert_error(api.post(URL, workflow("top", sub("to_root", "root"))), 400)
    assert "deeper than 4" in body["message"] and "top → root → c1 → c2 → c3 → c4" in body["message"]
    assert body["field"].endswith("subWorkflowParam.name")
    assert not WorkflowDefinition.objects.filter(name="top").exists()


def test_it_rejects_a_deep_chain_behind_a_child_already_seen_shallower(api):
    # top calls k directly (depth 1) and through c1 → c2 → c3 → k (depth 4);
    # k's own child then sits at depth 5 on the second path.
    leaf(api, "x")
    register(api, workflow("k", sub("to_x", "x")))
    register(api, workflow("c3", sub("to_k", "k")))
    register(api, workflow("c2", sub("to_c3", "c3")))
    register(api, workflow("c1", sub("to_c2", "c2")))
    body = assert_error(api.post(URL, workflow("top", sub("to_k", "k"), sub("to_c1", "c1"))), 400)
    assert "deeper than 4" in body["message"]


def test_it_rejects_deepening_a_chain_at_publish(api):
    _chain(api, ["root", "c1", "c2", "c3", "c4"])
    leaf(api, "c5")
    register(api, workflow("c4", sub("to_c5", "c5")))  # a draft; c4 alone is shallow
    assert api.post(f"{URL}/c4/publish").status_code == 200
    body = assert_error(api.post(f"{URL}/root/publish"), 400)
    assert "deeper than 4" in body["message"]
    assert set(snapshot_of("root", 1).body["workflows"]) == {"root@1", "c1@1", "c2@1", "c3@1", "c4@1"}


def test_it_refuses_to_republish_a_parent_whose_child_was_deleted(api):
    leaf(api, "child")
    register(api, workflow("parent", sub("call", "child")))
    assert api.delete(f"{URL}/child").status_code == 204
    assert_error(api.post(f"{URL}/parent/publish"), 400, "tasks[0].subWorkflowParam")
    assert snapshot_of("parent", 1) is not None


# --- delete -----------------------------------------------------------------


def test_it_deletes_a_definition_but_keeps_its_snapshots(api):
    register(api, workflow("orders"))
    register(api, workflow("orders"))
    api.post(f"{URL}/orders/publish")
    snapshots = list(WorkflowSnapshot.objects.filter(name="orders").values_list("pk", flat=True))
    assert len(snapshots) == 2

    assert api.delete(f"{URL}/orders").status_code == 204
    assert_error(api.get(f"{URL}/orders"), 404)
    assert_error(api.get(f"{URL}/orders/versions"), 404)
    assert_error(api.get(f"{URL}/orders/versions/1"), 404)
    assert_error(api.delete(f"{URL}/orders"), 404)
    assert not WorkflowVersion.objects.filter(definition__name="orders").exists()
    assert sorted(WorkflowSnapshot.objects.filter(name="orders").values_list("pk", flat=True)) == sorted(snapshots)


def test_it_starts_again_at_version_1_after_a_delete(api):
    register(api, workflow("orders"))
    register(api, workflow("orders"))
    api.delete(f"{URL}/orders")
    again = register(api, workflow("orders"))
    assert (again["version"], again["published"]) == (1, True)


def test_it_answers_404_when_deleting_an_unknown_name(api):
    assert_error(api.delete(f"{URL}/ghost"), 404)


# --- static limits through the API -------------------------------------------


def _nested(depth: int) -> dict:
    task: dict = simple("leaf")
    for level in range(depth - 1):
        task = {"name": "f", "taskReferenceName": f"f{level}", "type": "FORK_JOIN", "forkTasks": [[task]]}
    return task


def _loop(max_iterations: Any = None, **extra: Any) -> dict:
    task = {
        "name": "l",
        "taskReferenceName": "loop",
        "type": "DO_WHILE",
        "loopCondition": "false",
        "loopOver": [simple("body")],
        **extra,
    }
    if max_iterations is not None:
        task["maxIterations"] = max_iterations
    return task


def _fork(concurrency: Any) -> dict:
    return {
        "name": "f",
        "taskReferenceName": "fork",
        "type": "FORK_JOIN",
        "forkTasks": [[simple("x")]],
        "maxConcurrency": concurrency,
    }


def _dynamic(concurrency: Any) -> dict:
    return {
        "name": "d",
        "taskReferenceName": "dyn",
        "type": "FORK_JOIN_DYNAMIC",
        "inputParameters": {"items": []},
        "forkTask": simple("each"),
        "maxConcurrency": concurrency,
    }


STATIC_LIMITS = [
    ("nesting 17", [_nested(17)], "tasks[0]" + ".forkTasks[0][0]" * 16, "leaf"),
    ("duplicate ref", [simple("a"), simple("a")], "tasks[1].taskReferenceName", "a"),
    ("duplicate ref in fork", [simple("x"), _fork(2)], "tasks[1].forkTasks[0][0].taskReferenceName", "x"),
    ("unknown type", [simple("a", type="TELEPORT")], "tasks[0].type", "a"),
    ("loop 0", [_loop(0)], "tasks[0].maxIterations", "loop"),
    ("loop 1001", [_loop(1001)], "tasks[0].maxIterations", "loop"),
    ("loop string", [_loop("10")], "tasks[0].maxIterations", "loop"),
    ("fork 0", [_fork(0)], "tasks[0].maxConcurrency", "fork"),
    ("fork 17", [_fork(17)], "tasks[0].maxConcurrency", "fork"),
    ("dynamic 0", [_dynamic(0)], "tasks[0].maxConcurrency", "dyn"),
    ("dynamic 17", [_dynamic(17)], "tasks[0].maxConcurrency", "dyn"),
    (
        "loop in fork",
        [simple("a"), {"name": "f", "taskReferenceName": "fork", "type": "FORK_JOIN", "forkTasks": [[_loop(1001)]]}],
        "tasks[1].forkTasks[0][0].maxIterations",
        "loop",
    ),
    ("retry override", [simple("a", retryCount=101)], "tasks[0].retryCount", "a"),
    ("own output", [simple("a", inputParameters={"x": "${a.output.x}"})], "tasks[0].inputParameters.x", "a"),
    ("item outside template", [simple("a", inputParameters={"x": "${item}"})], "tasks[0].inputParameters.x", "a"),
    ("bad expression", [simple("a", inputParameters={"x": "${workflow.input.}"})], "tasks[0].inputParameters.x", "a"),
    (
        "join unknown",
        [{"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["ghost"]}],
        "tasks[0].joinOn",
        "j",
    ),
]


@pytest.mark.parametrize("tasks,field,ref", [c[1:] for c in STATIC_LIMITS], ids=[c[0] for c in STATIC_LIMITS])
def test_it_rejects_each_static_limit_with_400(api, tasks, field, ref):
    body = assert_error(api.post(URL, workflow("limited", *tasks)), 400, field)
    assert body["error"] == "VALIDATION_ERROR"
    assert body["taskReferenceName"] == ref
    assert field in body["message"]


@pytest.mark.parametrize(
    "tasks",
    [[_nested(16)], [_loop(1)], [_loop(1000)], [_fork(1)], [_fork(16)], [_dynamic(1)], [_dynamic(16)]],
    ids=["nesting 16", "loop 1", "loop 1000", "fork 1", "fork 16", "dynamic 1", "dynamic 16"],
)
def test_it_accepts_values_at_each_static_limit(api, tasks):
    register(api, workflow("at_limit", *tasks))


WORKFLOW_LEVEL = [
    ({"timeoutSeconds": -1}, "timeoutSeconds"),
    ({"timeoutPolicy": "RETRY"}, "timeoutPolicy"),
    ({"maxConcurrentTasks": -1}, "maxConcurrentTasks"),
    ({"maxConcurrentExecutions": "2"}, "maxConcurrentExecutions"),
    ({"rateLimitConfig": {"rateLimitKey": "k"}}, "rateLimitConfig.concurrentExecLimit"),
    ({"failureWorkflow": "bad name"}, "failureWorkflow"),
    ({"unknownThing": 1}, "unknownThing"),
    ({"description": 5}, "description"),
]


@pytest.mark.parametrize("fields,field", WORKFLOW_LEVEL, ids=lambda v: str(v))
def test_it_rejects_bad_workflow_level_fields_with_400(api, fields, field):
    assert_error(api.post(URL, workflow("wf_fields", **fields)), 400, field)


REJECTED_UPDATES = [
    ("limit", workflow("orders", _loop(1001)), 400),
    ("unknown child", workflow("orders", sub("call", "ghost")), 400),
    ("self cycle", workflow("orders", sub("call", "orders")), 400),
    ("not an object", ["orders"], 400),
]


@pytest.mark.parametrize("body,status", [c[1:] for c in REJECTED_UPDATES], ids=[c[0] for c in REJECTED_UPDATES])
def test_it_leaves_stored_versions_untouched_when_rejecting(api, body, status):
    register(api, workflow("orders", description="one"))
    register(api, workflow("orders", description="two"))
    snapshots = list(WorkflowSnapshot.objects.values_list("pk", "body"))

    assert_error(api.post(URL, body), status)

    definition = WorkflowDefinition.objects.get(name="orders")
    assert (definition.latest_version, definition.published_version) == (2, 1)
    assert [v["version"] for v in api.get(f"{URL}/orders/versions").json()] == [1, 2]
    assert published_version(api, "orders") == 1
    assert list(WorkflowSnapshot.objects.values_list("pk", "body")) == snapshots
    assert register(api, workflow("orders"))["version"] == 3  # no gap left behind


def test_it_leaves_no_definition_behind_when_a_first_version_is_rejected(api):
    assert_error(api.post(URL, workflow("fresh", sub("call", "ghost"))), 400)
    assert_error(api.get(f"{URL}/fresh"), 404)
    assert not WorkflowDefinition.objects.filter(name="fresh").exists()
    assert register(api, workflow("fresh"))["version"] == 1
