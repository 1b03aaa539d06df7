"""${...} expressions: parsing, finding, checking and resolving. Pure."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metadata.expressions import ExpressionError, check_reference, iter_strings, lookup, parse_path, paths_in, resolve

# --- parse_path --------------------------------------------------------------

PARSED = [
    ("workflow.input.x", ("workflow", "input", "x")),
    ("a.output.a[0].b", ("a", "output", "a", 0, "b")),
    ("a.output.list[10][2]", ("a", "output", "list", 10, 2)),
    ("workflow.variables.z", ("workflow", "variables", "z")),
    ("item", ("item",)),
    ("index", ("index",)),
    ("item[3]", ("item", 3)),
    ("  workflow.input.x  ", ("workflow", "input", "x")),
    ("my-ref.output.my-key", ("my-ref", "output", "my-key")),
    ("_a.b_c.D9", ("_a", "b_c", "D9")),
]


@pytest.mark.parametrize("text,path", PARSED)
def test_it_parses_paths(text, path):
    assert parse_path(text) == path


UNPARSABLE = [
    "",
    "   ",
    ".a",
    "a.",
    "a..b",
    "[0]",
    "[0].a",
    "a[x]",
    "a[-1]",
    "a[0]b",
    "a b",
    "a.b c",
    "a.0",
    "a.[0]",
    "a[0",
    "a$b",
    "1a",
    "a.b.${c}",
]


@pytest.mark.parametrize("text", UNPARSABLE)
def test_it_refuses_to_parse_bad_paths(text):
    with pytest.raises(ExpressionError):
        parse_path(text)


def test_it_says_where_parsing_failed():
    with pytest.raises(ExpressionError, match="at character 2"):
        parse_path("a..b")


# --- paths_in ------------------------------------------------------------------

FOUND = [
    ("no expressions", "plain text", []),
    ("dollar alone", "costs $5 {each}", []),
    ("whole", "${workflow.input.x}", [("workflow", "input", "x")]),
    ("two", "${a.output.x}-${b.output.y[1]}", [("a", "output", "x"), ("b", "output", "y", 1)]),
    ("embedded", "id=${workflow.input.id};", [("workflow", "input", "id")]),
    ("escaped", "$${workflow.input.x}", []),
    ("escaped and real", "$${literal} ${workflow.input.x}", [("workflow", "input", "x")]),
    ("same twice", "${a.status}${a.status}", [("a", "status"), ("a", "status")]),
]


@pytest.mark.parametrize("text,paths", [c[1:] for c in FOUND], ids=[c[0] for c in FOUND])
def test_it_finds_every_expression_in_a_string(text, paths):
    assert paths_in(text) == paths


BROKEN = [
    ("unterminated", "${workflow.input.x"),
    ("unterminated second", "${a.output} ${b"),
    ("nested", "${workflow.input.${a.output.k}}"),
    ("empty", "${}"),
    ("bad path", "${a..b}"),
    ("opening only", "value: ${"),
]


@pytest.mark.parametrize("text", [c[1] for c in BROKEN], ids=[c[0] for c in BROKEN])
def test_it_refuses_broken_expressions(text):
    with pytest.raises(ExpressionError):
        paths_in(text)


# --- iter_strings --------------------------------------------------------------


def test_it_lists_every_string_with_its_path():
    value = {"a": "x", "b": [1, "y", {"c": "z"}], "d": {"e": ["w"]}, "n": None}
    assert list(iter_strings(value)) == [("a", "x"), ("b[1]", "y"), ("b[2].c", "z"), ("d.e[0]", "w")]


@pytest.mark.parametrize("value", [1, 2.5, True, None, [], {}])
def test_it_finds_no_strings_in_non_string_values(value):
    assert list(iter_strings(value)) == []


def test_it_gives_a_bare_string_an_empty_path():
    assert list(iter_strings("s")) == [("", "s")]


# --- check_reference -------------------------------------------------------------

REFS = frozenset({"a", "b-2"})

KNOWN = [
    (("workflow", "input", "x"), False),
    (("workflow", "variables"), False),
    (("workflow", "executionId"), False),
    (("workflow", "output", "r"), False),
    (("a", "output", "x", 0), False),
    (("a", "input"), False),
    (("a", "status"), False),
    (("b-2", "taskId"), False),
    (("item",), True),
    (("item", "name"), True),
    (("index",), True),
]


@pytest.mark.parametrize("path,in_template", KNOWN)
def test_it_accepts_references_that_can_exist(path, in_template):
    check_reference(path, refs=REFS, in_template=in_template)


UNKNOWN = [
    (("workflow",), False, "'workflow' is followed by"),
    (("workflow", "inputs"), False, "'workflow' is followed by"),
    (("workflow", 0), False, "'workflow' is followed by"),
    (("a",), False, "'a' is followed by"),
    (("a", "outputs"), False, "'a' is followed by"),
    (("ghost", "output"), False, "not a task reference name"),
    (("item",), False, "only inside a FORK_JOIN_DYNAMIC"),
    (("index",), False, "only inside a FORK_JOIN_DYNAMIC"),
    (("ghost", "output"), True, "not a task reference name"),
]


@pytest.mark.parametrize("path,in_template,message", UNKNOWN)
def test_it_refuses_references_that_cannot_exist(path, in_template, message):
    with pytest.raises(ExpressionError, match=message):
        check_reference(path, refs=REFS, in_template=in_template)


# --- lookup and resolve ----------------------------------------------------------

CONTEXT = {
    "workflow": {
        "input": {"x": 5, "name": "ada", "obj": {"k": [1, 2]}, "flag": False, "none": None, "f": 1.5, "s": ""},
        "variables": {"z": "zed"},
    },
    "a": {"output": {"a": [{"b": "deep"}, {"b": 2}], "list": [10, 20, 30]}, "status": "COMPLETED"},
    "item": {"id": 7},
    "index": 3,
}

LOOKUPS = [
    (("workflow", "input", "x"), 5),
    (("a", "output", "a", 0, "b"), "deep"),
    (("a", "output", "list", 2), 30),
    (("a", "output", "list", 3), None),
    (("a", "output", "list", -1), 30),
    (("a", "output", "missing", "deeper"), None),
    (("a", "output", "a", "b"), None),
    (("a", "status", 0), None),
    (("workflow", "input", "name", 0), None),
    (("nope",), None),
    (("index",), 3),
    (("workflow", "input", "none"), None),
]


@pytest.mark.parametrize("path,value", LOOKUPS)
def test_it_looks_up_paths_and_gives_none_when_missing(path, value):
    assert lookup(CONTEXT, path) == value


WHOLE = [
    ("${workflow.input.x}", 5),
    ("${workflow.input.obj}", {"k": [1, 2]}),
    ("${workflow.input.obj.k}", [1, 2]),
    ("${workflow.input.flag}", False),
    ("${workflow.input.f}", 1.5),
    ("${workflow.input.none}", None),
    ("${workflow.input.missing}", None),
    ("${a.output.a[1].b}", 2),
    ("${a.output.list[0]}", 10),
    ("${a.output.list[9]}", None),
    ("${workflow.variables.z}", "zed"),
    ("${ workflow.input.x }", 5),
    ("${item.id}", 7),
    ("${index}", 3),
    ("${workflow.input.s}", ""),
]


@pytest.mark.parametrize("text,value", WHOLE)
def test_it_keeps_the_type_of_a_whole_string_expression(text, value):
    resolved = resolve(text, CONTEXT)
    assert resolved == value and type(resolved) is type(value)


INTERPOLATED = [
    ("x=${workflow.input.x}", "x=5"),
    ("${workflow.input.name}-${index}", "ada-3"),
    ("obj=${workflow.input.obj}", 'obj={"k":[1,2]}'),
    ("list=${workflow.input.obj.k}", "list=[1,2]"),
    ("flag=${workflow.input.flag}", "flag=false"),
    ("f=${workflow.input.f}", "f=1.5"),
    ("none=[${workflow.input.none}]", "none=[]"),
    ("missing=[${workflow.input.missing}]", "missing=[]"),
    ("deep=${a.output.a[0].b}", "deep=deep"),
    ("${a.status} ", "COMPLETED "),
    ("$${workflow.input.x}", "${workflow.input.x}"),
    ("$${literal} and ${workflow.input.x}", "${literal} and 5"),
    ("a $ b { c }", "a $ b { c }"),
    ("", ""),
]


@pytest.mark.parametrize("text,value", INTERPOLATED)
def test_it_interpolates_expressions_inside_longer_strings(text, value):
    assert resolve(text, CONTEXT) == value


def test_it_resolves_inside_objects_and_lists_and_leaves_keys_alone():
    value = {"${workflow.input.x}": ["${workflow.input.x}", {"n": "n=${index}"}, 7, None, True]}
    assert resolve(value, CONTEXT) == {"${workflow.input.x}": [5, {"n": "n=3"}, 7, None, True]}


def test_it_does_not_change_its_input():
    value = {"a": ["${workflow.input.x}"]}
    resolve(value, CONTEXT)
    assert value == {"a": ["${workflow.input.x}"]}


def test_it_renders_unicode_as_is_when_interpolating():
    assert resolve("${workflow.input.u}", {"workflow": {"input": {"u": "é"}}}) == "é"
    assert resolve("v=${workflow.input.u}", {"workflow": {"input": {"u": ["é"]}}}) == 'v=["\\u00e9"]'


# --- properties ----------------------------------------------------------------

_text_without_expressions = st.text().filter(lambda text: "${" not in text)
_json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _text_without_expressions
_json_values = st.recursive(
    _json_scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5),
    max_leaves=30,
)


@given(_json_values)
def test_it_leaves_values_without_expressions_unchanged(value):
    assert resolve(value, CONTEXT) == value


@given(_json_values)
def test_it_returns_any_value_a_whole_expression_names(value):
    context = {"workflow": {"input": {"v": value}}}
    assert resolve("${workflow.input.v}", context) == value


@given(_json_values)
def test_it_interpolates_strings_raw_and_everything_else_as_json(value):
    context = {"workflow": {"input": {"v": value}}}
    rendered = resolve("<${workflow.input.v}>", context)
    expected = value if isinstance(value, str) else "" if value is None else json.dumps(value, separators=(",", ":"))
    assert rendered == f"<{expected}>"


@pytest.mark.parametrize(
    "value", ["cost $${y}", "$${", {"k": "$${x}"}, ["${a.output}"]], ids=["escape", "bare escape", "in object", "expr"]
)
def test_it_never_unescapes_or_resolves_inside_a_resolved_value(value):
    context = {"workflow": {"input": {"v": value}}}
    expected = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    assert resolve("<${workflow.input.v}>", context) == f"<{expected}>"


@given(_text_without_expressions)
def test_it_finds_no_paths_in_text_without_expressions(text):
    assert paths_in(text) == []
