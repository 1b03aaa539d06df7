"""Fixed SQL for the engine's hot path: the dequeue, results, and the reads
and writes of deciding.

The ORM compiles every query anew and builds each model instance through a
general path; on the worker routes that was close to half of a request's
CPU. These helpers run plain SQL on Django's own connection, yet adapt every
parameter and convert every column with the model fields' own methods, so
they behave the same on PostgreSQL and SQLite and the models stay the one
description of the tables (three shortcuts give the same values more
cheaply: plain values adapted without the field's method walk, ``saver``;
UUID lists as one array literal; empty JSON not parsed). Only equality
and one-of conditions are built here; anything richer is written out by the
caller. How the statements are sent (server-side binding, prepared) and why:
docs/engine.md, "The hot path and what it costs".
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import operator
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, cast, overload

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, models, router
from django.db.models.base import ModelState

from nodeflow import transactions

# Prepare a statement once a connection has run it this many times (psycopg
# keeps the 100 most used per connection).
PREPARE_THRESHOLD = 2

# Parameters as the cursor takes them: a sequence for %s, a mapping for %(name)s.
Params = Sequence[Any] | Mapping[str, Any]


def _cached[**P, R](function: Callable[P, R]) -> Callable[P, R]:
    """``functools.cache``, keeping the function's signature for the type
    checker. Typeshed takes a cached function's arguments as ``Hashable``,
    and mypy counts no class as one (python/mypy#11470); every function
    cached here takes a model class."""
    return cast(Callable[P, R], functools.cache(function))


def _db():
    """This thread's connection itself: each attribute read through the
    ``connection`` proxy looks the connection up again, and a batch of 100
    rows reads thousands."""
    return connections[DEFAULT_DB_ALIAS]


def cursor():
    """A cursor on Django's connection (its wrappers and query log included).
    On PostgreSQL it binds parameters server-side: a statement's text stays
    the same whatever the values, so psycopg does not quote each value into
    it, and PostgreSQL can keep the statement prepared (see
    ``NODE_FLOW_PREPARED_STATEMENTS``). Django's own cursors keep binding
    client-side, and a client-side cursor never prepares."""
    db = _db()
    if db.vendor != "postgresql":
        return db.cursor()
    db.close_if_health_check_failed()
    db.ensure_connection()
    raw = db.connection
    if settings.NODE_FLOW_PREPARED_STATEMENTS and raw.prepare_threshold is None:
        raw.prepare_threshold = PREPARE_THRESHOLD
    with db.wrap_database_errors:
        bound = _bound_cursor_class()(raw)
        if db.timezone is dt.UTC and raw.info.timezone is dt.UTC:
            # Django wraps psycopg's timestamptz loader to set the tzinfo
            # to its own; in a UTC session psycopg's sets that very one.
            bound.adapters.register_loader("timestamptz", _psycopg_timestamptz_loader())
        return db._prepare_cursor(bound)


@functools.cache
def _psycopg_timestamptz_loader() -> type:
    import psycopg

    loader = psycopg.adapters.get_loader(psycopg.postgres.types["timestamptz"].oid, psycopg.pq.Format.TEXT)
    if loader is None:  # psycopg registers one for every built-in type
        raise RuntimeError("psycopg has no text loader for timestamptz")
    return loader


# Statement texts whose conversion to PostgreSQL's $n form is kept (see
# ``_bound_cursor_class``): the fixed statements and the shapes of rows
# held together (``_insert_statement``).
CONVERTED_STATEMENTS = 512


@functools.cache
def _bound_cursor_class() -> type:
    from django.db.backends.postgresql.base import ServerBindingCursor  # imports psycopg
    from psycopg import _queries

    kept = functools.lru_cache(maxsize=CONVERTED_STATEMENTS)(_queries._query2pg_nocache)

    class KeptQuery(_queries.PostgresQuery):
        """psycopg's server-side query, its text's conversion kept however
        many parameters it takes: psycopg keeps it only for statements of
        at most 50 parameters and 4 KB (ORM-made texts rarely repeat), and
        converting a start's held rows (63 parameters) anew took 157 µs.
        Every text sent here is one of the fixed statements or a shape of
        held rows, so they repeat."""

        __slots__ = ()
        converted = staticmethod(kept)

        def convert(self, query, vars):
            if vars is None or not isinstance(query, (str, bytes)):
                return super().convert(query, vars)
            query = self._ensure_bytes(query)
            self.query, self._want_formats, self._order, self._parts = self.converted(query, self._tx.encoding)
            self.dump(vars)

    class BoundCursor(ServerBindingCursor):
        """Django's server-binding cursor, keeping the statement it ran:
        psycopg forgets it for a prepared one, and Django's query log
        (``connection.queries``, CaptureQueriesContext) reads it."""

        _query_cls = KeptQuery

        def _send_query_prepared(self, name, pgq, **kwargs):
            self._query = pgq
            return super()._send_query_prepared(name, pgq, **kwargs)

    return BoundCursor


@_cached
def columns(model: type[models.Model], alias: str = "", fields: tuple[str, ...] | None = None) -> str:
    """Every concrete column of ``model``, in field order, or the columns of
    ``fields`` in their order: what ``rows`` reads."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(f'{prefix}"{field.column}"' for field in _fields(model, fields))


@_cached
def _fields(model: type[models.Model], names: tuple[str, ...] | None) -> tuple[models.Field, ...]:
    if names is None:
        return tuple(model._meta.concrete_fields)
    return tuple(model._meta.get_field(name) for name in names)


def table(model: type[models.Model]) -> str:
    return f'"{model._meta.db_table}"'


def for_update() -> str:
    """`` FOR UPDATE`` where the database has row locks (SQLite's transaction is the lock)."""
    return " FOR UPDATE" if connection.features.has_select_for_update else ""


def placeholders(count: int) -> str:
    return ", ".join(["%s"] * count)


def any_of(model: type[models.Model], name: str, values: Iterable[Any], *, alias: str = "") -> tuple[str, list]:
    """The condition "field ``name`` is one of ``values``" and its parameters.
    On PostgreSQL one array parameter (``= ANY(%s)``): the statement's text
    is the same for any number of values, so it is parsed once, and an
    empty list is simply false. SQLite has no arrays: ``IN (…)``."""
    db = _db()
    field = model._meta.get_field(name)
    column = f'{alias}."{field.column}"' if alias else f'"{field.column}"'
    if db.vendor == "postgresql" and isinstance(getattr(field, "target_field", field), models.UUIDField):
        # One text parameter ('{…,…}'): psycopg dumps a list element by element.
        text = ",".join(str(v) if isinstance(v, uuid.UUID) else str(uuid.UUID(str(v))) for v in values)
        return f"{column} = ANY(%s::uuid[])", ["{" + text + "}"]
    save = saver(field)
    prepped = [save(value, db) for value in values]
    if db.vendor == "postgresql":
        return f"{column} = ANY(%s)", [prepped]
    return f"{column} IN ({placeholders(len(prepped))})", prepped


# Column values compared as themselves in a grouping key; anything else
# (a dict, a list) by its repr.
_PLAIN = frozenset({str, int, float, bool, type(None), dt.datetime, uuid.UUID})


def same_values_key(values: dict[str, Any]) -> tuple:
    """A key that two dicts of column values share only if they are equal,
    to write rows that get the same values with one statement. Each value's
    class is part of the key (1, 1.0 and True are equal in Python, not as
    column values); JSON values are compared by ``repr``, which tells their
    types apart too. Equal dicts built in another key order merely go to
    another statement."""
    key = []
    for name, value in values.items():
        kind = value.__class__
        key.append((name, kind, value) if kind in _PLAIN else (name, kind, repr(value)))
    return tuple(key)


def prep(model: type[models.Model], name: str, value: Any) -> Any:
    """``value`` as the database takes it for field ``name`` (a UUID is hex
    text on SQLite, a dict is JSON, a datetime follows the backend)."""
    return _named(model, name)[1](value, _db())


# --- parameters ---------------------------------------------------------------------
# A field's ``get_db_prep_save`` walks three or four methods for each value
# (the lazy-string check, ``to_python``, the backend's adaptation); a start
# inserts about sixty values, and that walk took some 120 µs of its 2 ms.
# ``saver`` gives the same values for the plain Python values rows hold, in
# about half the time, and hands anything else to the field's own method
# (``tests/test_sql_savers.py`` compares the two on every field).

_INTEGER_FIELDS = frozenset(
    {
        models.IntegerField,
        models.BigIntegerField,
        models.SmallIntegerField,
        models.PositiveIntegerField,
        models.PositiveBigIntegerField,
        models.PositiveSmallIntegerField,
    }
)

Saver = Callable[[Any, Any], Any]


@functools.cache
def saver(field: models.Field) -> Saver:
    """``saver(field)(value, db)`` is ``field.get_db_prep_save(value, db)``."""
    slow = field.get_db_prep_save
    kind = type(field)
    if kind in (models.CharField, models.TextField):  # to_python: a str or None is itself

        def text(value, db):
            return value if value is None or value.__class__ is str else slow(value, db)

        return text
    if kind in _INTEGER_FIELDS:  # get_prep_value: int(); then the backend's integer adaptation
        internal = field.get_internal_type()

        def integer(value, db):
            if value.__class__ is int:
                return db.ops.adapt_integerfield_value(value, internal)
            return None if value is None else slow(value, db)

        return integer
    if kind is models.BooleanField:  # to_python: a bool is itself (None is refused unless null)

        def boolean(value, db):
            return value if value.__class__ is bool else slow(value, db)

        return boolean
    if kind is models.DateTimeField:  # an aware datetime goes straight to the backend's adaptation

        def instant(value, db):
            if value is None:
                return None
            if value.__class__ is dt.datetime and value.tzinfo is not None:
                return db.ops.adapt_datetimefield_value(value)
            return slow(value, db)

        return instant
    if kind is models.UUIDField:

        def identifier(value, db):
            if value.__class__ is uuid.UUID:
                return value if db.features.has_native_uuid_field else value.hex
            return None if value is None else slow(value, db)

        return identifier
    if kind in (models.ForeignKey, models.OneToOneField):  # a key saves as its target field does
        target = saver(field.target_field)

        def key(value, db):
            if value is None:
                return None
            return target(value, db) if value.__class__ in (int, uuid.UUID) else slow(value, db)

        return key
    return slow


@functools.cache
def pre_saver(field: models.Field) -> Callable[[models.Model], Any]:
    """``field.pre_save(obj, add=True)``: the instance's own value, unless
    the field sets one as it saves (``auto_now``, ``auto_now_add``)."""
    if type(field).pre_save is models.Field.pre_save or (
        isinstance(field, models.DateField) and not field.auto_now and not field.auto_now_add
    ):
        return operator.attrgetter(field.attname)
    return functools.partial(_pre_save, field)


def _pre_save(field: models.Field, obj: models.Model) -> Any:
    return field.pre_save(obj, add=True)


@_cached
def _row_savers(model: type[models.Model]) -> tuple[tuple[Callable[[models.Model], Any], Saver], ...]:
    """Each concrete field's (``pre_saver``, ``saver``), in column order:
    looked up once per model, not once per field of every row."""
    return tuple((pre_saver(field), saver(field)) for field in model._meta.concrete_fields)


@_cached
def _named(model: type[models.Model], name: str) -> tuple[str, Saver]:
    """Field ``name``'s quoted column and ``saver``."""
    field = model._meta.get_field(name)
    return f'"{field.column}"', saver(field)


_EMPTY_JSON = {"{}": dict, "[]": list}


def _json_from_db(value, expression, connection):
    """``JSONField.from_db_value`` for a field without a custom decoder,
    with the empty object and list (most of the engine's JSON columns:
    outputs not yet written, no variables, no logs) not parsed at all."""
    if value is None:
        return None
    empty = _EMPTY_JSON.get(value) if isinstance(value, str) else None
    if empty is not None:
        return empty()
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


@_cached
def _converters(
    model: type[models.Model], vendor: str, names: tuple[str, ...] | None = None
) -> list[tuple[int, list, Any]]:
    del vendor  # part of the cache key: converters differ by backend
    found = []
    for index, field in enumerate(_fields(model, names)):
        col = field.get_col(model._meta.db_table)
        converters = connection.ops.get_db_converters(col) + col.get_db_converters(connection)
        if isinstance(field, models.JSONField) and field.decoder is None:
            converters = [_json_from_db if c == field.from_db_value else c for c in converters]
        if converters:
            found.append((index, converters, col))
    return found


@_cached
def _attnames(model: type[models.Model], names: tuple[str, ...] | None = None) -> tuple[str, ...]:
    return tuple(field.attname for field in _fields(model, names))


def to_model[M: models.Model](
    model: type[M], values: Sequence[Any], fields: tuple[str, ...] | None = None, db=None
) -> M:
    """One row, read as ``columns(model, fields=fields)`` lists them, as a
    model instance. Built the way ``Model.from_db`` leaves one (the fields
    read set, not adding, this database), without ``__init__``'s per-field
    descriptor walk and its init signals, which none of the engine's models
    uses. A field not read is deferred, as with ``QuerySet.only``: reading
    it queries the database."""
    db = db or _db()
    values = list(values)
    for index, converters, col in _converters(model, db.vendor, fields):
        for convert in converters:
            values[index] = convert(values[index], col, db)
    instance = object.__new__(model)  # no model defines __new__; this skips __init__
    instance.__dict__.update(zip(_attnames(model, fields), values, strict=False))
    instance._state = ModelState()
    instance._state.adding = False
    instance._state.db = db.alias
    return instance


def new[M: models.Model](model: type[M], **values: Any) -> M:
    """A new, unsaved instance, as ``model(**values)`` makes one: each field
    given by its name or its column's (a related object given by its
    field's name sets its id and is cached, so reading it queries nothing),
    the rest their defaults. Built as ``to_model`` builds a row's, without
    ``__init__``'s per-field walk and its init signals (a task's 26 µs
    there, 8.5 here; an execution's 46, 11): a start's execution, every
    task a decision schedules (docs/performance.md, session 32)."""
    by_name, defaults = _new_fields(model)
    instance = object.__new__(model)  # no model defines __new__; this skips __init__
    state = instance._state = ModelState()
    given = instance.__dict__
    for name, value in values.items():
        field = by_name.get(name)
        if field is None:
            raise TypeError(f"{model.__name__}() got an unexpected keyword argument '{name}'")
        if name == field.attname or value is None:
            given[field.attname] = value
        else:  # a related object, by its field's name, as its descriptor sets it
            given[field.attname] = getattr(value, field.target_field.attname)
            state.fields_cache[name] = value
            if state.db is None:
                state.db = router.db_for_write(model, instance=value)
    for attname, default in defaults:
        if attname not in given:
            given[attname] = default()
    return instance


@_cached
def _new_fields(model: type[models.Model]) -> tuple[dict[str, Any], tuple[tuple[str, Callable[[], Any]], ...]]:
    """``new``'s fields by name and by column name; each column's default."""
    fields = model._meta.concrete_fields
    by_name = {field.attname: field for field in fields} | {field.name: field for field in fields}
    return by_name, tuple((field.attname, field._get_default) for field in fields)


@overload
def rows[M: models.Model](
    model: type[M], sql: str, params: Params = (), *, extra: Literal[0] = 0, fields: tuple[str, ...] | None = None
) -> list[M]: ...


@overload
def rows[M: models.Model](
    model: type[M], sql: str, params: Params = (), *, extra: int, fields: tuple[str, ...] | None = None
) -> list[tuple[M | None, tuple]]: ...


def rows[M: models.Model](
    model: type[M], sql: str, params: Params = (), *, extra: int = 0, fields: tuple[str, ...] | None = None
) -> list[M] | list[tuple[M | None, tuple]]:
    """Run ``sql`` whose select list starts with ``columns(model, fields=fields)``.
    With ``extra``, that many further columns follow, and each row comes
    back as (instance, extras); the instance is None when the model's
    columns are all NULL (an outer join that found nothing)."""
    width = len(_fields(model, fields))
    with cursor() as bound:
        bound.execute(sql, params)
        fetched = bound.fetchall()
    db = _db()
    if not extra:
        return [to_model(model, row, fields, db) for row in fetched]
    return [
        (to_model(model, row[:width], fields, db) if row[0] is not None else None, tuple(row[width:]))
        for row in fetched
    ]


def _where(model: type[models.Model], where: dict[str, Any]) -> tuple[str, list]:
    db = _db()
    clauses, params = [], []
    for name, value in where.items():
        if name.endswith("__gt"):  # "later than": a lease still live at an instant
            column, save = _named(model, name[:-4])
            clauses.append(f"{column} > %s")
            params.append(save(value, db))
            continue
        if isinstance(value, (list, tuple, set, frozenset)):
            clause, values = any_of(model, name, value)
            clauses.append(clause)
            params.extend(values)
            continue
        column, save = _named(model, name)
        clauses.append(f"{column} = %s")
        params.append(save(value, db))
    return " AND ".join(clauses), params


def update(model: type[models.Model], *, values: dict[str, Any], where: dict[str, Any]) -> int:
    """``UPDATE … SET values WHERE`` every ``where`` field equals its value
    (is one of them, for a list; is greater, for a name ending ``__gt``);
    the number of rows changed. Plain values only (no expressions)."""
    db = _db()
    sets, params = [], []
    for name, value in values.items():
        column, save = _named(model, name)
        sets.append(f"{column} = %s")
        params.append(save(value, db))
    condition, where_params = _where(model, where)
    with cursor() as bound:
        bound.execute(f"UPDATE {table(model)} SET {', '.join(sets)} WHERE {condition}", params + where_params)
        return bound.rowcount


def insert(objs: Iterable[models.Model]) -> None:
    """Insert new rows (every concrete field, as the instances hold them).
    For models whose fields have no pre-save hooks beyond
    ``auto_now``/``auto_now_add``, which get the instance's own value.
    Inside a service transaction on PostgreSQL the rows are held and sent
    with the other rows held, just before the transaction's next statement
    (``_held``); otherwise at once, in one statement."""
    objs = list(objs)
    if not objs:
        return
    model = type(objs[0])
    savers = _row_savers(model)
    db = _db()
    rows = [[save(get(obj), db) for get, save in savers] for obj in objs]
    held = _held()
    if held is None:
        _send_rows({model: rows})
    else:
        held.setdefault(model, []).extend(rows)
        if _parameters(held) >= MAX_STATEMENT_PARAMETERS:
            _send_held(held)
    for obj in objs:
        obj._state.adding = False
        obj._state.db = db.alias


# --- rows held for the next statement -----------------------------------------------
# An insert answers nothing its caller reads (no RETURNING; an error is
# raised by whatever statement sends it), so inside a service transaction
# (``transactions.outermost``) on PostgreSQL its rows wait: just before the
# transaction's next statement, and at its end before the commit, every row
# held goes in one statement, one multi-row INSERT per table, joined as WITH
# clauses. A start's execution and first task are one round trip, not two;
# a bulk start's rows are one statement, not one per row. A held row's error
# (a unique key a concurrent start took) is raised by the statement that
# sends it: for a keyed insert in a savepoint, the savepoint's release,
# which Django then rolls back, so the conflict stays the savepoint's. A
# rollback to a savepoint drops the rows held (they were all inserted after
# the last statement, so inside that savepoint). Foreign keys are checked
# at commit (Django's constraints are deferred), so rows of any tables go
# together in any order. SQLite has no round trips to save: rows go at once.
HELD = "sql.held_rows"
# At most this many parameters a statement (PostgreSQL takes 65,535); rows
# held are sent early once they reach it.
MAX_STATEMENT_PARAMETERS = 20_000
_ROLLBACK_TO = "ROLLBACK TO SAVEPOINT"

Held = dict[type[models.Model], list[list[Any]]]


def _held() -> Held | None:
    """This service transaction's held rows by model (None: send at once).
    The first time, the connection is set to send them before its next statement."""
    held = _held_now()
    if held is not None:
        transactions.wrap_statements(_send_held_first)
    return held


def _send_held_first(execute, statement, params, many, context):
    held = transactions.pending(HELD, _close_held, last=True)
    if held:
        if isinstance(statement, str) and statement.startswith(_ROLLBACK_TO):
            held.clear()
        else:
            _send_held(held)
    return execute(statement, params, many, context)


def _send_held(held: Held, then: tuple[str, list] = ("", []), *, read: bool = False) -> tuple | None:
    rows = dict(held)
    held.clear()  # sent, or failed: either way no longer held
    return _send_rows(rows, then, read=read)


def _close_held(held: Held) -> None:
    """The rows still held at the end of the service transaction. In a
    transaction its reads began in pipeline mode
    (``transactions.with_begin``), they go with its ``with_commit``
    calls as one statement, its closing one, which goes with its
    ``COMMIT``: one round trip. Otherwise, or when they need more than one
    statement, as any held rows go."""
    if transactions.pipelined() and _parameters(held) <= _limit():
        with transactions.closing():
            _send_held(held, then=transactions.take_with_commit())
        return
    _send_held(held)


def _parameters(rows: Held) -> int:
    return sum(len(values) * len(values[0]) for values in rows.values())


def _limit() -> int:
    """Parameters a statement may carry here: ``MAX_STATEMENT_PARAMETERS``
    and never more than the database's own limit."""
    return min(MAX_STATEMENT_PARAMETERS, _db().features.max_query_params or MAX_STATEMENT_PARAMETERS)


def holds(objs: Sequence[models.Model]) -> bool:
    """Whether the rows of ``objs`` (instances of one model, inserted in
    this service transaction) are all still held, not sent."""
    held = _held_now()
    if not held or not objs or type(objs[0]) not in held:
        return False
    position, save = _pk_saver(type(objs[0]))
    db = _db()
    wanted = {save(obj.pk, db) for obj in objs}
    return wanted <= {row[position] for row in held[type(objs[0])]}


def send_held_reading(then: tuple[str, list], resave: Sequence[models.Model]) -> tuple:
    """Send every row held now in as few statements as ``insert`` would,
    the rows of ``resave`` (held, ``holds``) saved again from their
    instances first, the last statement selecting ``then`` (a select list
    and its parameters, which do not see the rows it inserts): its row."""
    held = _held_now()
    assert held is not None, "send_held_reading: outside a service transaction"
    model = type(resave[0])
    position, save = _pk_saver(model)
    db = _db()
    again = {save(obj.pk, db): obj for obj in resave}
    savers = _row_savers(model)
    held[model] = [
        row if row[position] not in again else [s(get(again[row[position]]), db) for get, s in savers]
        for row in held[model]
    ]
    found = _send_held(held, then, read=True)
    assert found is not None
    return found


def _held_now() -> Held | None:
    """This service transaction's held rows (None outside one, or on SQLite)."""
    if _db().vendor != "postgresql" or not transactions.active():
        return None
    return transactions.pending(HELD, _close_held, last=True)


@_cached
def _pk_saver(model: type[models.Model]) -> tuple[int, Saver]:
    """Where the primary key is in a held row, and its ``saver``."""
    position = next(i for i, field in enumerate(model._meta.concrete_fields) if field.primary_key)
    return position, _row_savers(model)[position][1]


def _send_rows(rows: Held, then: tuple[str, list] = ("", []), *, read: bool = False) -> tuple | None:
    """Insert ``rows`` (model → each row's values, in column order): one
    statement, or as few as keep each within ``MAX_STATEMENT_PARAMETERS``
    (and the database's own limit); the last one ends with ``then``'s
    select list and its parameters (``_insert_statement``), whose row it
    returns with ``read`` (in a pipeline, reading it would end the pipeline's
    round trip: ``_close_held`` does not)."""
    limit = _limit()
    shape: list[tuple[type[models.Model], int]] = []
    params: list[Any] = []
    for model, values in rows.items():
        width = len(values[0])
        per_statement = max(1, limit // width)
        for first in range(0, len(values), per_statement):
            piece = values[first : first + per_statement]
            if params and len(params) + len(piece) * width > limit:
                _execute_insert(shape, params)
                shape, params = [], []
            shape.append((model, len(piece)))
            for row in piece:
                params += row
    if not shape:
        return None
    calls, call_params = then
    return _execute_insert(shape, params + call_params, then=calls, read=read)


def _execute_insert(
    shape: Sequence[tuple[type[models.Model], int]], params: list[Any], *, then: str = "", read: bool = False
) -> tuple | None:
    with cursor() as bound:
        bound.execute(_insert_statement(tuple(shape), then), params)
        return bound.fetchone() if read else None


@functools.lru_cache(maxsize=256)
def _insert_statement(shape: tuple[tuple[type[models.Model], int], ...], then: str = "") -> str:
    """The statement inserting so many rows of each model: a multi-row
    INSERT per model, all but the last as WITH clauses; with ``then`` (a
    select list: ``pg_notify`` calls), every INSERT a WITH clause and
    ``SELECT then`` the statement (PostgreSQL runs a data-modifying WITH
    clause whether or not the statement reads it)."""
    inserts = []
    for model, count in shape:
        row = f"({placeholders(len(_row_savers(model)))})"
        inserts.append(f"INSERT INTO {table(model)} ({columns(model)}) VALUES {', '.join([row] * count)}")
    if then:
        inserts.append(f"SELECT {then}")
    *first, last = inserts
    return f"WITH {', '.join(f'held{i} AS ({s})' for i, s in enumerate(first))} {last}" if first else last
