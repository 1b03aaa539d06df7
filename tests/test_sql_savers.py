"""``sql.saver`` gives exactly what the field's own ``get_db_prep_save``
gives, for every field of every engine model, on the database under test:
the same value of the same class, or the same error."""

from __future__ import annotations

import datetime as dt
import uuid
import warnings

import pytest
from django.apps import apps
from django.db import connection

from executions import sql

APPS = ("nodeflow", "metadata", "executions", "quotas")
FIELDS = [
    pytest.param(field, id=f"{model.__name__}.{field.name}")
    for app in APPS
    for model in apps.get_app_config(app).get_models()
    for field in model._meta.concrete_fields
]
ID = uuid.UUID("0b6c6e2f-0d0c-4a43-9b71-3f4c2a6f0e11")
VALUES = [
    None,
    "",
    "text",
    "5",
    str(ID),
    0,
    7,
    -3,
    2**40,
    True,
    False,
    1.5,
    dt.datetime(2026, 12, 6, 5, 30, tzinfo=dt.UTC),
    dt.datetime(2026, 12, 6, 7, 30, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    dt.datetime(2026, 12, 6, 5, 30),  # naive: the field's own path, with its warning
    ID,
    {},
    {"a": [1, "b"]},
    [1, 2],
]


def outcome(save, value):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            saved = save(value, connection)
        except Exception as exc:  # noqa: BLE001 - the error itself is the outcome compared
            return ("raises", type(exc))
    # psycopg's JSON wrapper has no equality of its own: compare what it wraps.
    return (type(saved), getattr(saved, "obj", saved))


@pytest.mark.parametrize("field", FIELDS)
def test_saver_is_get_db_prep_save(field):
    save = sql.saver(field)
    for value in VALUES:
        assert outcome(save, value) == outcome(field.get_db_prep_save, value), value


def test_the_plain_fields_take_the_quick_way():
    """Not every field falls back to the slow path: the point of ``saver``."""
    quick = [param.values[0] for param in FIELDS if sql.saver(param.values[0]) != param.values[0].get_db_prep_save]
    assert len(quick) > len(FIELDS) // 2


@pytest.mark.parametrize("field", FIELDS)
def test_pre_saver_is_pre_save(field):
    """The instance's own value, or, for a field that sets its own as it
    saves (``auto_now``), what the field's ``pre_save`` sets."""
    model = field.model
    obj = model()
    before = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
        setattr(obj, field.attname, before)
        value = sql.pre_saver(field)(obj)
        assert value > before
        assert getattr(obj, field.attname) == value
    else:
        assert sql.pre_saver(field)(obj) is field.pre_save(obj, add=True)
