"""host_tool(): names, descriptions and argument schemas from signatures, type hints and
docstrings, with plain values and hypothesis; bad tools raise BadHostTool when the session's
options are made; drivers that cannot offer tools refuse them with ToolsUnsupported."""
from __future__ import annotations

import dataclasses
import enum
import json
import sys
from typing import Any, Dict, List, Literal, Optional, Tuple, TypedDict, Union

import pytest
from hypothesis import given
from hypothesis import strategies as st

import bridge_client as bc
from bridge_client.tool_schema import arg_docs, first_paragraph
from host_support import options, session_options


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Point:
    """A point on the plane."""

    x: int
    y: int = 0


class Movie(TypedDict):
    title: str
    year: int


def search(
    query: str,
    limit: int = 10,
    ratio: float = 0.5,
    exact: bool = False,
    tags: Optional[List[str]] = None,
    weights: Dict[str, float] = {},  # noqa: B006 - a default the schema shows
    mode: Literal["fast", "slow"] = "fast",
    color: Color = Color.RED,
    at: Optional[Point] = None,
    movie: Optional[Movie] = None,
    either: Union[int, str] = 0,
    pair: Tuple[int, str] = (0, ""),
    anything: Any = None,
) -> str:
    """Search the catalogue.

    Finds items whose text matches.

    Args:
        query: the words to look for,
            over two lines.
        limit (int): at most this many.

    Returns:
        The matches.
    """
    return query


def test_the_schema_comes_from_the_signature_hints_and_docstring():
    tool = bc.host_tool(search)
    assert tool.name == "search" and tool.description == "Search the catalogue."
    schema = tool.schema
    props = schema["properties"]
    assert schema["type"] == "object" and schema["required"] == ["query"]
    assert schema["additionalProperties"] is False
    assert props["query"] == {"type": "string", "description": "the words to look for, over two lines."}
    assert props["limit"] == {"type": "integer", "description": "at most this many.", "default": 10}
    assert props["ratio"]["type"] == "number" and props["exact"]["type"] == "boolean"
    assert props["tags"]["anyOf"] == [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]
    assert props["weights"]["type"] == "object"
    assert props["weights"]["additionalProperties"] == {"type": "number"}
    assert props["mode"]["enum"] == ["fast", "slow"]
    assert props["color"] == {"enum": ["red", "blue"]}
    point = props["at"]["anyOf"][0]
    assert point["properties"] == {"x": {"type": "integer"}, "y": {"type": "integer"}}
    assert point["required"] == ["x"] and point["description"] == "A point on the plane."
    movie = props["movie"]["anyOf"][0]
    assert movie["properties"] == {"title": {"type": "string"}, "year": {"type": "integer"}}
    assert sorted(movie["required"]) == ["title", "year"]
    assert props["either"]["anyOf"] == [{"type": "integer"}, {"type": "string"}]
    assert props["pair"]["prefixItems"] == [{"type": "integer"}, {"type": "string"}]
    assert "type" not in props["anything"]
    json.dumps(tool.spec())  # all of it is JSON


def test_explicit_name_description_and_schema_win():
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    tool = bc.host_tool(search, name="find", description="Find things.", schema=schema, approve=True)
    assert (tool.name, tool.description, tool.schema, tool.approve) == ("find", "Find things.", schema, True)
    assert tool.spec()["retryOnHostLoss"] is False


@pytest.mark.skipif(sys.version_info < (3, 10), reason="X | Y needs Python 3.10")
def test_pep604_unions_map_too():
    ns: Dict[str, Any] = {}
    exec("def f(a: int | None, b: list[str]) -> None:\n    '''F.'''\n", ns)
    props = bc.host_tool(ns["f"]).schema["properties"]
    assert props["a"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert props["b"] == {"type": "array", "items": {"type": "string"}}


def test_run_converts_enums_and_dataclasses_and_reports_errors_without_tracebacks():
    def paint(color: Color, at: Point) -> dict:
        """Paint."""
        assert isinstance(color, Color) and isinstance(at, Point)
        return {"color": color.value, "x": at.x}

    tool = bc.host_tool(paint)
    assert tool.run({"color": "blue", "at": {"x": 3}}) == ({"color": "blue", "x": 3}, False)
    output, is_error = tool.run({"color": "green", "at": {"x": 3}})
    assert is_error and output.startswith("ValueError: ") and "Traceback" not in output
    assert tool.run([1]) == ("the arguments must be a JSON object, got list", True)

    def odd() -> object:
        """Odd."""
        return object()

    assert bc.host_tool(odd).run({}) == ("the tool returned a object, which JSON cannot carry", True)

    def big() -> str:
        """Big."""
        return "x" * (1024 * 1024)

    output, is_error = bc.host_tool(big).run({})
    assert is_error and output.startswith("the tool's result is 1048578 bytes of JSON, over the limit")
    assert bc.host_tool(lambda: "\ud800", name="lone").run({})[1], "a lone surrogate is no UTF-8"


def _no_hint(x):  # type: ignore[no-untyped-def]
    """No hint."""


def _bad_type(x: bytes) -> None:
    """Bytes."""


def _int_keys(x: Dict[int, str]) -> None:
    """Int keys."""


def _star(*args: int) -> None:
    """Star."""


@pytest.mark.parametrize(
    "fn, kw, words",
    [
        (_no_hint, {}, "has no type hint"),
        (_bad_type, {}, "cannot be sent as JSON"),
        (_int_keys, {}, "keys must be str"),
        (_star, {}, "plain named parameter"),
        (search, {"name": "has space"}, "must be 1 to 64"),
        (search, {"name": "9starts"}, "must be 1 to 64"),
        (search, {"name": "x" * 65}, "must be 1 to 64"),
        (search, {"schema": {"type": "array"}}, "type object"),
        (search, {"approve": "yes"}, "approve must be a bool"),
        ("not callable", {}, "needs a function"),
    ],
)
def test_bad_tools_raise_bad_host_tool(fn, kw, words):
    with pytest.raises(bc.BadHostTool, match=words):
        bc.host_tool(fn, **kw)


def test_bad_tool_lists_raise_when_the_session_options_are_made(sandbox):
    with pytest.raises(bc.BadHostTool, match="two host tools are named 'search'"):
        bc.CreateSessionOptions(workspace=bc.Workspace(sandbox), tools=[search, bc.host_tool(search)])
    with pytest.raises(bc.BadHostTool, match="has no type hint"):
        bc.CreateSessionOptions(workspace=bc.Workspace(sandbox), tools=[_no_hint])
    with pytest.raises(bc.BadHostTool, match="must be a list"):
        bc.CreateSessionOptions(workspace=bc.Workspace(sandbox), tools="search")
    with pytest.raises(ValueError, match="tool_timeout"):
        bc.CreateSessionOptions(workspace=bc.Workspace(sandbox), tool_timeout=0)
    made = bc.CreateSessionOptions(workspace=bc.Workspace(sandbox), tools=[search])
    assert [t.name for t in made.tools] == ["search"]
    assert made.interactive_payload()["hostTools"][0]["name"] == "search"
    assert bc.CreateSessionOptions(workspace=bc.Workspace(sandbox)).interactive_payload() is None


def test_pi_refuses_a_session_with_tools_when_it_is_created(workspace):
    with pytest.raises(bc.ToolsUnsupported, match="pi agent cannot call host tools"):
        bc.create_session("pi", workspace, tools=[search])


def test_a_driver_without_host_tools_refuses_them_at_the_first_request(sandbox, model):
    opts = options("plain_driver:make_driver", agent_id="my-echo")
    with bc.create_session(opts, session_options(sandbox, tools=[search])) as session:
        with pytest.raises(bc.ToolsUnsupported, match="my-echo agent cannot call host tools"):
            session.turn("hi")


def test_a_host_tool_named_like_a_driver_tool_is_refused(sandbox, model):
    def read_file(path: str) -> str:
        """Shadow the driver's own tool."""
        return path

    with bc.create_session(model("host-lookup"), session_options(sandbox, tools=[read_file])) as session:
        with pytest.raises(bc.BadRequest, match="'read_file' has the name of one of the openai"):
            session.turn("hi")


_IDENT = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True)
_WORDS = st.text(st.characters(whitelist_categories=("L", "N"), whitelist_characters=" ,."), min_size=1)


@given(name=_IDENT, text=_WORDS.map(str.strip).filter(bool))
def test_arg_docs_reads_back_what_an_args_section_says(name, text):
    doc = f"Do it.\n\nArgs:\n    {name}: {text}\n\nReturns:\n    nothing.\n"
    assert arg_docs(doc) == {name: " ".join(text.split()) if "\n" in text else text}
    assert first_paragraph(doc) == "Do it."


_HINTS = st.recursive(
    st.sampled_from([str, int, float, bool, type(None)]),
    lambda inner: st.one_of(
        inner.map(lambda t: List[t]),  # type: ignore[valid-type]
        inner.map(lambda t: Dict[str, t]),  # type: ignore[valid-type]
        inner.map(lambda t: Optional[t]),
    ),
    max_leaves=6,
)


@given(hint=_HINTS)
def test_every_supported_hint_gives_a_json_schema(hint):
    def fn(value):  # type: ignore[no-untyped-def]
        """Fn."""

    fn.__annotations__ = {"value": hint}
    schema = bc.host_tool(fn).schema
    assert schema["required"] == ["value"]
    json.loads(json.dumps(schema))
