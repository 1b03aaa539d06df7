"""The fast path for start bodies (executions.start_bodies) must agree with
StartExecutionSerializer: whatever it accepts, DRF accepts with the same
validated data; anything else it leaves to DRF."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executions.serializers import StartExecutionSerializer
from executions.start_bodies import plain_start
from tests.test_result_bodies import json_values

texts = st.one_of(
    st.text(max_size=10), st.just(" padded "), st.just("a\x00b"), st.just("\ud800"), st.just("k" * 257), st.just("")
)
near_values = {
    "name": st.one_of(st.sampled_from(["checkout", "a.b-c_1", "", "no spaces", "x" * 129]), st.integers(), texts),
    "version": st.one_of(st.integers(-2, 5), st.none(), st.booleans(), st.floats(), st.text(max_size=2)),
    "input": st.one_of(st.dictionaries(st.text(max_size=5), json_values, max_size=3), json_values),
    "correlationId": st.one_of(texts, st.none(), st.integers()),
    "idempotencyKey": st.one_of(texts, st.none(), st.integers()),
    "priority": st.one_of(st.integers(-3, 120), st.booleans(), st.floats(), st.none()),
    "extra": json_values,
}


@st.composite
def bodies(draw):
    keys = draw(st.sets(st.sampled_from(sorted(near_values)), max_size=len(near_values)))
    body = {key: draw(near_values[key]) for key in keys}
    if draw(st.booleans()):
        body.setdefault("name", "checkout")
    return body


def drf(body):
    serializer = StartExecutionSerializer(data=body)
    return serializer.validated_data if serializer.is_valid() else None


@settings(max_examples=500, deadline=None)
@given(bodies())
def test_a_start_it_accepts_validates_the_same_in_drf(body):
    fast = plain_start(body)
    if fast is not None:
        assert drf(body) == fast


@pytest.mark.parametrize(
    "body",
    [
        {"name": "checkout"},
        {"name": "checkout", "version": 2, "input": {"a": [1, None]}, "priority": 7},
        {"name": "checkout", "version": None, "correlationId": "c-1", "idempotencyKey": "k-1"},
        {"name": "checkout", "correlationId": None, "idempotencyKey": None},
    ],
)
def test_it_takes_the_plainly_valid_bodies_itself(body):
    assert plain_start(body) is not None
    assert plain_start(body) == drf(body)


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"name": "checkout", "typo": 1},
        {"name": 7},
        {"name": "checkout", "version": 0},
        {"name": "checkout", "version": True},
        {"name": "checkout", "input": []},
        {"name": "checkout", "priority": 100},
        {"name": "checkout", "idempotencyKey": " k "},
        {"name": "checkout", "idempotencyKey": ""},
    ],
)
def test_it_leaves_anything_else_to_the_serializer(body):
    assert plain_start(body) is None
