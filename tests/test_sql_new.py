"""``sql.new`` makes the instance ``Model(**values)`` makes, for every
engine model: the same attributes, the same defaults (a callable one
called for each instance), a related object given by its field's name
cached and its id set, and the same state; an unknown name refused."""

from __future__ import annotations

import datetime as dt

import pytest
from django.apps import apps
from django.db.models import NOT_PROVIDED

from executions import sql
from executions.models import Execution, Task
from nodeflow.models import Namespace

APPS = ("nodeflow", "metadata", "executions", "quotas")
MODELS = [pytest.param(model, id=model.__name__) for app in APPS for model in apps.get_app_config(app).get_models()]
NOW = dt.datetime(2026, 12, 6, 5, 30, tzinfo=dt.UTC)


def attributes(instance) -> dict:
    return {name: value for name, value in instance.__dict__.items() if name != "_state"}


def called_defaults(model) -> set[str]:
    """The columns whose default is made anew for each instance (an id, a dict)."""
    return {field.attname for field in model._meta.concrete_fields if callable(field.default)}


@pytest.mark.parametrize("model", MODELS)
def test_defaults_as_the_model_makes_them(model):
    made, built = model(), sql.new(model)
    fresh = called_defaults(model)
    same = {name: value for name, value in attributes(made).items() if name not in fresh}
    assert {name: value for name, value in attributes(built).items() if name not in fresh} == same
    assert set(attributes(built)) == set(attributes(made))
    for name in fresh:
        assert type(getattr(built, name)) is type(getattr(made, name))
    assert (built._state.adding, built._state.db) == (made._state.adding, made._state.db)
    for field in model._meta.concrete_fields:
        if field.primary_key and field.default is not NOT_PROVIDED and callable(field.default):
            assert sql.new(model).pk != built.pk  # called for each instance


def test_given_values_and_a_related_object():
    namespace = Namespace(id=7, name="default")
    values = {"namespace": namespace, "name": "one", "version": 2, "snapshot_id": 3, "workflow_key": "one@2"}
    values |= {"input": {"a": 1}, "priority": 5, "created_at": NOW, "started_at": NOW}
    made, built = Execution(**values), sql.new(Execution, **values)
    assert attributes(built) == {**attributes(made), "id": built.id}
    assert built.namespace_id == 7 and built.namespace is namespace
    assert (built._state.adding, built._state.db) == (made._state.adding, made._state.db)
    assert sql.new(Execution, namespace=None).namespace_id is None


def test_a_column_name_is_taken_as_the_model_takes_it():
    built = sql.new(Task, namespace_id=7, execution_id=None, attempt=3)
    assert (built.namespace_id, built.execution_id, built.attempt) == (7, None, 3)


def test_an_unknown_name_is_refused():
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        sql.new(Task, nope=1)
