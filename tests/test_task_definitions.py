"""/v1/ns/{ns}/metadata/task-definitions[/{name}] (SPEC §3): every field's
default, range and type, create vs replace, PATCH, DELETE, cross-field rules."""

from __future__ import annotations

from datetime import datetime

import pytest

from nodeflow import clock
from nodeflow.fields import MAX_DURATION_S

LIST = "metadata/task-definitions"

# SPEC §3: every field a GET returns, with its default.
DEFAULTS: dict[str, object] = {
    "description": "",
    "retryCount": 3,
    "retryLogic": "EXPONENTIAL_BACKOFF",
    "retryDelaySeconds": 1,
    "backoffScaleFactor": 2,
    "maxRetryDelaySeconds": 3600,
    "jitter": 0.2,
    "retryBudget": 1,
    "nonRetryableErrors": [],
    "scheduleToStartTimeout": 0,
    "startToCloseTimeout": 3600,
    "heartbeatTimeout": 0,
    "timeoutSeconds": 0,
    "timeoutPolicy": "RETRY",
    "concurrentExecLimit": 0,
    "rateLimitPerFrequency": 0,
    "rateLimitFrequencySeconds": 0,
    "semaphores": [],
}
READ_ONLY = {"name", "createdAt", "updatedAt"}

DURATIONS = [
    "retryDelaySeconds",
    "maxRetryDelaySeconds",
    "scheduleToStartTimeout",
    "startToCloseTimeout",
    "heartbeatTimeout",
    "timeoutSeconds",
    "rateLimitFrequencySeconds",
]
INTEGERS = ["retryCount", "concurrentExecLimit", "rateLimitPerFrequency"]
NUMBERS = INTEGERS + DURATIONS + ["backoffScaleFactor", "jitter", "retryBudget"]
STRINGS = ["description", "retryLogic", "timeoutPolicy"]
LISTS = ["nonRetryableErrors", "semaphores"]

# (field, lowest accepted, highest accepted, just below, just above).
# rateLimitPerFrequency needs a window, so its rows carry one (see _body).
RANGES = [
    ("retryCount", 0, 100, -1, 101),
    ("backoffScaleFactor", 1, 100, 0.999, 100.001),
    ("jitter", 0, 1, -0.001, 1.001),
    ("retryBudget", 0, 1, -0.001, 1.001),
    ("concurrentExecLimit", 0, 1_000_000, -1, 1_000_001),
    ("rateLimitPerFrequency", 0, 1_000_000_000, -1, 1_000_000_001),
    *[(field, 0, MAX_DURATION_S, -0.001, MAX_DURATION_S + 1) for field in DURATIONS],
]

# The seed's first curl (seeds/000_*.txt).
CHARGE = {
    "name": "charge",
    "retryCount": 5,
    "retryLogic": "EXPONENTIAL_BACKOFF",
    "retryDelaySeconds": 2,
    "backoffScaleFactor": 2,
    "maxRetryDelaySeconds": 300,
    "jitter": 0.2,
    "retryBudget": 0.3,
    "nonRetryableErrors": ["card_declined", "INVALID_ARGUMENT"],
}


def _body(field: str, value: object, name: str = "t") -> dict:
    body = {"name": name, field: value}
    if field == "rateLimitPerFrequency":
        body["rateLimitFrequencySeconds"] = 60
    return body


def assert_invalid(response, field: str | None) -> dict:
    """400 in the error model, naming ``field``."""
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["error"] == "VALIDATION_ERROR"
    assert body["field"] == field
    if field:
        assert field in body["message"]
    return body


def assert_error(response, status: int, error: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["error"] == error
    assert isinstance(body["message"], str) and body["message"]
    return body


def _when(iso: str) -> datetime:
    return datetime.fromisoformat(iso)


def _without_updated(body: dict) -> dict:
    return {key: value for key, value in body.items() if key != "updatedAt"}


@pytest.fixture
def charge(api) -> dict:
    response = api.post(LIST, CHARGE)
    assert response.status_code == 201
    return response.json()


# --- defaults -------------------------------------------------------------------


def test_it_creates_with_only_a_name_and_shows_every_default(api):
    response = api.post(LIST, {"name": "t"})
    assert response.status_code == 201
    body = api.get(f"{LIST}/t").json()
    assert set(body) == set(DEFAULTS) | READ_ONLY
    assert body["name"] == "t"
    assert {key: body[key] for key in DEFAULTS} == DEFAULTS
    assert response.json() == body


@pytest.mark.parametrize("field,default", DEFAULTS.items())
def test_it_applies_the_default(api, field, default):
    api.post(LIST, {"name": "t"})
    assert api.get(f"{LIST}/t").json()[field] == default


# --- ranges ---------------------------------------------------------------------


@pytest.mark.parametrize("field,low,high,below,above", RANGES)
def test_it_accepts_both_boundaries(api, field, low, high, below, above):
    for value in (low, high):
        response = api.post(LIST, _body(field, value))
        assert response.status_code in (200, 201), response.content
        assert response.json()[field] == value
        assert api.get(f"{LIST}/t").json()[field] == value


@pytest.mark.parametrize("field,low,high,below,above", RANGES)
def test_it_rejects_one_past_each_boundary(api, field, low, high, below, above):
    for value in (below, above):
        assert_invalid(api.post(LIST, _body(field, value)), field)
    assert api.get(f"{LIST}/t").status_code == 404


@pytest.mark.parametrize("field", DURATIONS)
def test_it_accepts_fractional_seconds(api, field):
    response = api.post(LIST, _body(field, 0.25))
    assert response.status_code == 201
    assert response.json()[field] == 0.25


@pytest.mark.parametrize("field", INTEGERS)
def test_it_rejects_a_fraction_for_a_count(api, field):
    assert_invalid(api.post(LIST, _body(field, 2.5)), field)


@pytest.mark.parametrize("field", NUMBERS)
def test_it_rejects_a_number_too_large_for_a_float(api, field):
    # A JSON integer past 1e308 must be a 400, not an OverflowError.
    raw = '{{"name": "t", "{}": 1{}}}'.format(field, "0" * 400)
    assert_invalid(api.call("POST", LIST, raw=raw), field)


# --- types ----------------------------------------------------------------------


@pytest.mark.parametrize("field", NUMBERS)
@pytest.mark.parametrize("value", ["3", True, False, None, [1], {"n": 1}], ids=repr)
def test_it_rejects_a_non_number(api, field, value):
    assert_invalid(api.post(LIST, _body(field, value)), field)


@pytest.mark.parametrize("field", ["name", *STRINGS])
@pytest.mark.parametrize("value", [3, 1.5, True, None, ["x"], {"x": 1}], ids=repr)
def test_it_rejects_a_non_string(api, field, value):
    body = {"name": "t", field: value}
    assert_invalid(api.post(LIST, body), field)
    assert api.get(LIST).json() == []


@pytest.mark.parametrize("field", LISTS)
@pytest.mark.parametrize("value", ["abc", {"a": "b"}, 3, True, None], ids=repr)
def test_it_rejects_a_non_list(api, field, value):
    assert_invalid(api.post(LIST, {"name": "t", field: value}), field)


@pytest.mark.parametrize("field", LISTS)
@pytest.mark.parametrize("item", [3, True, None, ["x"], {"x": 1}, ""], ids=repr)
def test_it_rejects_a_bad_list_item_naming_its_index(api, field, item):
    assert_invalid(api.post(LIST, {"name": "t", field: ["ok", item]}), f"{field}[1]")


# --- enums, names, lists --------------------------------------------------------


@pytest.mark.parametrize(
    "field,value",
    [(f, v) for f in ("retryLogic", "timeoutPolicy") for v in ("RETRY_FOREVER", "", "fixed", "retry")]
    + [("retryLogic", "RETRY"), ("timeoutPolicy", "FIXED")],
)
def test_it_rejects_an_unknown_enum_value(api, field, value):
    body = assert_invalid(api.post(LIST, {"name": "t", field: value}), field)
    assert "must be one of" in body["message"]


@pytest.mark.parametrize("value", ["FIXED", "LINEAR_BACKOFF", "EXPONENTIAL_BACKOFF"])
def test_it_accepts_every_retry_logic(api, value):
    assert api.post(LIST, {"name": "t", "retryLogic": value}).json()["retryLogic"] == value


@pytest.mark.parametrize("value", ["RETRY", "TIME_OUT_WF", "ALERT_ONLY"])
def test_it_accepts_every_timeout_policy(api, value):
    assert api.post(LIST, {"name": "t", "timeoutPolicy": value}).json()["timeoutPolicy"] == value


@pytest.mark.parametrize("name", ["a", "A-z_0.9", "x" * 128, "charge.v2", "-", "..."])
def test_it_accepts_a_valid_name(api, name):
    response = api.post(LIST, {"name": name})
    assert response.status_code == 201
    assert api.get(f"{LIST}/{name}").json()["name"] == name


@pytest.mark.parametrize("name", ["", "x" * 129, "a b", "a/b", "é", "a:b", "a\tb"])
def test_it_rejects_an_invalid_name(api, name):
    assert_invalid(api.post(LIST, {"name": name}), "name")


def test_it_requires_a_name(api):
    assert_invalid(api.post(LIST, {"retryCount": 1}), "name")


def test_it_rejects_a_description_too_long(api):
    assert api.post(LIST, {"name": "t", "description": "d" * 10_000}).status_code == 201
    assert_invalid(api.post(LIST, {"name": "t", "description": "d" * 10_001}), "description")


def test_it_limits_non_retryable_errors(api):
    assert api.post(LIST, {"name": "t", "nonRetryableErrors": [f"e{i}" for i in range(100)]}).status_code == 201
    assert api.post(LIST, {"name": "t", "nonRetryableErrors": ["e" * 1024]}).status_code == 200
    assert_invalid(
        api.post(LIST, {"name": "t", "nonRetryableErrors": [f"e{i}" for i in range(101)]}), "nonRetryableErrors"
    )
    assert_invalid(api.post(LIST, {"name": "t", "nonRetryableErrors": ["e" * 1025]}), "nonRetryableErrors[0]")


def test_it_stores_semaphore_names(api):
    response = api.post(LIST, {"name": "t", "semaphores": ["db", "payments.api"]})
    assert response.status_code == 201
    assert api.get(f"{LIST}/t").json()["semaphores"] == ["db", "payments.api"]


@pytest.mark.parametrize("bad", ["", "a b", "x" * 129, "a/b"])
def test_it_validates_semaphore_names(api, bad):
    assert_invalid(api.post(LIST, {"name": "t", "semaphores": ["db", bad]}), "semaphores[1]")


def test_it_rejects_a_semaphore_named_twice(api):
    body = assert_invalid(api.post(LIST, {"name": "t", "semaphores": ["db", "api", "db"]}), "semaphores")
    assert "twice" in body["message"]


def test_it_limits_the_number_of_semaphores(api):
    assert api.post(LIST, {"name": "t", "semaphores": [f"s{i}" for i in range(16)]}).status_code == 201
    assert_invalid(api.post(LIST, {"name": "t", "semaphores": [f"s{i}" for i in range(17)]}), "semaphores")


@pytest.mark.parametrize("field", ["retryCont", "type", "ownerMail", "retry_count", "version"])
def test_it_rejects_an_unknown_field(api, field):
    body = assert_invalid(api.post(LIST, {"name": "t", field: 1}), field)
    assert "unknown field" in body["message"]


# --- rate limit -----------------------------------------------------------------


def test_it_requires_a_window_for_a_rate_limit(api):
    body = assert_invalid(api.post(LIST, {"name": "t", "rateLimitPerFrequency": 5}), "rateLimitFrequencySeconds")
    assert "rateLimitPerFrequency" in body["message"]
    zero = {"name": "t", "rateLimitPerFrequency": 5, "rateLimitFrequencySeconds": 0}
    assert_invalid(api.post(LIST, zero), "rateLimitFrequencySeconds")
    assert api.get(f"{LIST}/t").status_code == 404


def test_it_accepts_a_rate_limit_with_a_window(api):
    response = api.post(LIST, {"name": "t", "rateLimitPerFrequency": 5, "rateLimitFrequencySeconds": 0.5})
    assert response.status_code == 201
    assert (response.json()["rateLimitPerFrequency"], response.json()["rateLimitFrequencySeconds"]) == (5, 0.5)


def test_it_accepts_a_window_without_a_rate_limit(api):
    assert api.post(LIST, {"name": "t", "rateLimitFrequencySeconds": 10}).status_code == 201


def test_it_checks_the_rate_limit_rule_against_stored_values_on_patch(api):
    api.post(LIST, {"name": "t"})
    assert_invalid(api.patch(f"{LIST}/t", {"rateLimitPerFrequency": 5}), "rateLimitFrequencySeconds")
    assert api.patch(f"{LIST}/t", {"rateLimitFrequencySeconds": 60}).status_code == 200
    assert api.patch(f"{LIST}/t", {"rateLimitPerFrequency": 5}).status_code == 200
    assert_invalid(api.patch(f"{LIST}/t", {"rateLimitFrequencySeconds": 0}), "rateLimitFrequencySeconds")
    body = api.get(f"{LIST}/t").json()
    assert (body["rateLimitPerFrequency"], body["rateLimitFrequencySeconds"]) == (5, 60)
    response = api.patch(f"{LIST}/t", {"rateLimitPerFrequency": 0, "rateLimitFrequencySeconds": 0})
    assert response.status_code == 200


# --- create, replace, read ------------------------------------------------------


def test_it_creates_the_seed_charge_definition(api):
    response = api.post(LIST, CHARGE)
    assert response.status_code == 201
    body = response.json()
    assert {key: body[key] for key in CHARGE} == CHARGE
    assert body["timeoutPolicy"] == "RETRY"
    assert body["startToCloseTimeout"] == 3600
    assert api.get(f"{LIST}/charge").json() == body


def test_it_replaces_with_200_and_resets_omitted_fields(api, charge):
    clock.advance(60)
    response = api.post(LIST, {"name": "charge", "jitter": 0.5})
    assert response.status_code == 200
    body = api.get(f"{LIST}/charge").json()
    assert body == response.json()
    assert body["jitter"] == 0.5
    assert {key: body[key] for key in DEFAULTS if key != "jitter"} == {
        key: value for key, value in DEFAULTS.items() if key != "jitter"
    }
    assert body["createdAt"] == charge["createdAt"]
    assert _when(body["updatedAt"]) > _when(charge["updatedAt"])


def test_it_accepts_a_fetched_body_posted_back(api, charge):
    fetched = api.get(f"{LIST}/charge").json()
    response = api.post(LIST, fetched)
    assert response.status_code == 200
    assert _without_updated(response.json()) == _without_updated(fetched)


def test_it_lists_definitions_by_name_with_every_field(api, api_for):
    api.post(LIST, {"name": "zeta"})
    api.post(LIST, CHARGE)
    api_for("admin", "other").post(LIST, {"name": "elsewhere"})
    body = api.get(LIST).json()
    assert [row["name"] for row in body] == ["charge", "zeta"]
    assert all(set(row) == set(DEFAULTS) | READ_ONLY for row in body)
    assert body[0] == api.get(f"{LIST}/charge").json()


def test_it_lists_nothing_in_an_empty_namespace(api):
    assert api.get(LIST).json() == []


def test_it_keeps_namespaces_apart(api, api_for):
    other = api_for("admin", "other")
    assert api.post(LIST, {"name": "t", "retryCount": 1}).status_code == 201
    assert other.post(LIST, {"name": "t", "retryCount": 9}).status_code == 201
    assert api.get(f"{LIST}/t").json()["retryCount"] == 1
    assert other.get(f"{LIST}/t").json()["retryCount"] == 9


def test_it_answers_404_for_an_unknown_definition(api):
    body = assert_error(api.get(f"{LIST}/nope"), 404, "NOT_FOUND")
    assert "nope" in body["message"]


def test_it_leaves_the_stored_definition_alone_when_a_replace_is_rejected(api, charge):
    for bad in (
        {"name": "charge", "retryCount": 101},
        {"name": "charge", "oops": 1},
        {"name": "charge", "semaphores": ["a", "a"]},
    ):
        assert api.post(LIST, bad).status_code == 400
    assert api.get(f"{LIST}/charge").json() == charge


# --- patch ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"retryCount": 0},
        {"retryLogic": "FIXED"},
        {"jitter": 0},
        {"nonRetryableErrors": []},
        {"semaphores": ["db"]},
        {"timeoutPolicy": "ALERT_ONLY", "timeoutSeconds": 90.5},
        {"description": "charges a card"},
        {"concurrentExecLimit": 4},
    ],
    ids=lambda change: ",".join(change),
)
def test_it_patches_only_the_given_fields(api, charge, change):
    response = api.patch(f"{LIST}/charge", change)
    assert response.status_code == 200
    body = api.get(f"{LIST}/charge").json()
    assert body == response.json()
    assert _without_updated(body) == {**_without_updated(charge), **change}


def test_it_accepts_an_empty_patch(api, charge):
    response = api.patch(f"{LIST}/charge", {})
    assert response.status_code == 200
    assert _without_updated(response.json()) == _without_updated(charge)


@pytest.mark.parametrize(
    "change,field",
    [
        ({"retryCount": 101}, "retryCount"),
        ({"retryCount": "5"}, "retryCount"),
        ({"jitter": True}, "jitter"),
        ({"backoffScaleFactor": 0.5}, "backoffScaleFactor"),
        ({"retryLogic": "RANDOM"}, "retryLogic"),
        ({"timeoutPolicy": None}, "timeoutPolicy"),
        ({"heartbeatTimeout": -1}, "heartbeatTimeout"),
        ({"semaphores": "db"}, "semaphores"),
        ({"semaphores": ["db", "db"]}, "semaphores"),
        ({"nonRetryableErrors": [1]}, "nonRetryableErrors[0]"),
        ({"retryCont": 1}, "retryCont"),
        ({"name": "bad name"}, "name"),
        ({"retryCount": 1, "jitter": 2}, "jitter"),
    ],
)
def test_it_rejects_an_invalid_patch_and_changes_nothing(api, charge, change, field):
    assert_invalid(api.patch(f"{LIST}/charge", change), field)
    assert api.get(f"{LIST}/charge").json() == charge


def test_it_cannot_rename_with_patch(api, charge):
    body = assert_invalid(api.patch(f"{LIST}/charge", {"name": "refund", "retryCount": 1}), "name")
    assert "cannot be changed" in body["message"]
    assert api.get(f"{LIST}/refund").status_code == 404
    assert api.get(f"{LIST}/charge").json() == charge


def test_it_accepts_its_own_name_in_a_patch(api, charge):
    response = api.patch(f"{LIST}/charge", {"name": "charge", "retryCount": 1})
    assert response.status_code == 200
    assert response.json()["retryCount"] == 1


@pytest.mark.parametrize("raw", ["[]", '"x"', "3", "null"])
def test_it_rejects_a_patch_that_is_not_an_object(api, charge, raw):
    response = api.call("PATCH", f"{LIST}/charge", raw=raw)
    assert_error(response, 400, "VALIDATION_ERROR")
    assert api.get(f"{LIST}/charge").json() == charge


def test_it_answers_404_when_patching_an_unknown_definition(api):
    assert_error(api.patch(f"{LIST}/nope", {"retryCount": 1}), 404, "NOT_FOUND")
    assert api.get(f"{LIST}/nope").status_code == 404


# --- delete ---------------------------------------------------------------------


def test_it_deletes_with_204_then_404(api, charge):
    response = api.delete(f"{LIST}/charge")
    assert response.status_code == 204
    assert response.content == b""
    assert_error(api.get(f"{LIST}/charge"), 404, "NOT_FOUND")
    assert_error(api.delete(f"{LIST}/charge"), 404, "NOT_FOUND")
    assert api.get(LIST).json() == []


def test_it_deletes_only_in_its_namespace(api, api_for, charge):
    other = api_for("admin", "other")
    other.post(LIST, CHARGE)
    assert api.delete(f"{LIST}/charge").status_code == 204
    assert other.get(f"{LIST}/charge").status_code == 200


def test_it_creates_again_after_a_delete(api, charge):
    api.delete(f"{LIST}/charge")
    response = api.post(LIST, {"name": "charge"})
    assert response.status_code == 201
    assert response.json()["retryCount"] == 3
