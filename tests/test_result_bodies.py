"""The fast path for result bodies (executions.result_bodies) must agree with
the serializers: whatever it accepts, DRF accepts with the same validated
data; anything else it leaves to DRF."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executions.result_bodies import plain_result, plain_results
from executions.serializers import BatchResultsSerializer, ResultSerializer

TASK_ID = "5a4e0b7c-1111-4222-8333-944455556666"

# What a JSON body can hold: the parser refuses NaN and infinities (nodeflow/parsers.py).
json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8,
)
near_values = {
    "leaseToken": st.one_of(st.just("tok_EN-1"), st.none(), st.text(max_size=70), st.integers(), st.just(" tok ")),
    "status": st.one_of(
        st.sampled_from(["COMPLETED", "FAILED", "FAILED_WITH_TERMINAL_ERROR", "IN_PROGRESS"]),
        st.sampled_from(["", "DONE", "completed", "CANCELED"]),
        st.integers(),
    ),
    "outputData": st.one_of(st.dictionaries(st.text(max_size=5), json_values, max_size=3), json_values),
    "reasonForIncompletion": st.one_of(
        st.text(max_size=20),
        st.just("  padded  "),
        st.just("a\x00b"),
        st.just("x" * 10_001),
        st.just("\ud800"),
        st.none(),
        st.integers(),
    ),
    "callbackAfterSeconds": st.one_of(
        st.integers(-5, 40_000_000),
        st.floats(),
        st.booleans(),
        st.text(max_size=3),
        st.just(10**400),
        st.just(31_536_000),
    ),
    "logs": st.one_of(
        st.lists(json_values, max_size=4),
        st.lists(st.none(), min_size=1, max_size=2),
        st.just(list(range(101))),
        json_values,
    ),
    "taskId": st.one_of(st.just(TASK_ID), st.just(TASK_ID.replace("-", "")), st.just("not-a-uuid"), st.integers()),
    "next": st.one_of(
        st.fixed_dictionaries(
            {},
            optional={
                "workerId": st.one_of(st.just("w-1"), st.text(max_size=4), st.just(" w "), st.just("x" * 257)),
                "count": st.one_of(st.integers(-1, 102), st.booleans(), st.just(1.0)),
                "taskType": st.one_of(st.just("step"), st.text(max_size=4), st.none()),
                "extra": json_values,
            },
        ),
        json_values,
    ),
    "extra": json_values,
}


@st.composite
def bodies(draw, *, task_id: bool):
    keys = draw(st.sets(st.sampled_from(sorted(near_values)), max_size=len(near_values)))
    body = {key: draw(near_values[key]) for key in keys}
    if draw(st.booleans()):
        body.setdefault("status", "COMPLETED")
    if task_id and draw(st.booleans()):
        body.setdefault("taskId", TASK_ID)
    return body


def drf(serializer_class, body):
    serializer = serializer_class(data=body)
    return serializer.validated_data if serializer.is_valid() else None


@settings(max_examples=400, deadline=None)
@given(bodies(task_id=False))
def test_a_result_it_accepts_validates_the_same_in_drf(body):
    fast = plain_result(body)
    if fast is not None:
        assert drf(ResultSerializer, body) == fast


@settings(max_examples=200, deadline=None)
@given(st.lists(bodies(task_id=True), min_size=0, max_size=4), st.one_of(st.none(), near_values["next"]))
def test_a_batch_it_accepts_validates_the_same_in_drf(items, then):
    body = {"results": items} if then is None else {"results": items, "next": then}
    fast = plain_results(body)
    if fast is not None:
        assert drf(BatchResultsSerializer, body) == fast


@pytest.mark.parametrize(
    "body",
    [
        {"status": "COMPLETED"},
        {
            "status": "FAILED",
            "leaseToken": "abc_DEF-123",
            "outputData": {"a": [1, None]},
            "reasonForIncompletion": " why ",
            "callbackAfterSeconds": 2.5,
            "logs": ["x", {"y": 1}],
        },
        {"status": "IN_PROGRESS", "leaseToken": None, "callbackAfterSeconds": 0},
        {"status": "COMPLETED", "leaseToken": "abc", "next": {"workerId": "w-1", "count": 2}},
        {"status": "COMPLETED", "leaseToken": "abc", "next": {}},
        {"status": "COMPLETED", "leaseToken": "abc", "next": {"taskType": "step"}},
    ],
)
def test_it_takes_the_plainly_valid_bodies_itself(body):
    assert plain_result(body) == drf(ResultSerializer, body)


@pytest.mark.parametrize(
    "body",
    [
        {"status": "DONE"},
        {"leaseToken": "t"},
        {"status": "COMPLETED", "typo": 1},
        {"status": "COMPLETED", "logs": [None]},
        {"status": "COMPLETED", "reasonForIncompletion": "a\x00"},
        {"status": "COMPLETED", "callbackAfterSeconds": True},
        {"status": "COMPLETED", "leaseToken": " t "},
        {"status": "COMPLETED", "outputData": None},
        {"status": "COMPLETED", "taskId": TASK_ID},
        {"status": "COMPLETED", "next": {"count": 0}},
        {"status": "COMPLETED", "next": {"workerId": " w "}},
        {"status": "COMPLETED", "next": {"workerId": ""}},
        {"status": "COMPLETED", "next": {"count": True}},
        {"status": "COMPLETED", "next": None},
    ],
)
def test_it_leaves_anything_else_to_the_serializer(body):
    assert plain_result(body) is None


def test_a_batch_needs_a_task_id_on_every_item():
    assert plain_results({"results": [{"status": "COMPLETED"}]}) is None
    fast = plain_results({"results": [{"status": "COMPLETED", "taskId": TASK_ID}]})
    assert fast == {
        "results": [
            {
                "status": "COMPLETED",
                "taskId": uuid.UUID(TASK_ID),
                "outputData": {},
                "reasonForIncompletion": "",
                "callbackAfterSeconds": 0.0,
                "logs": [],
            }
        ]
    }
