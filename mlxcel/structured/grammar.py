"""From a request's `response_format` (or GBNF `grammar`) to a compiled, per-request
`Constraint`.

`ResponseFormat.parse` checks the wire object's shape and the schema limits, and
`grammar_spec()` turns it into a llguidance grammar (cheap, no compilation);
`gbnf_grammar` checks a GBNF text's size and leaves its conversion to the compile.
`compile_constraint` then builds the matcher on a small worker pool with a time
bound, so a hostile schema costs a worker, never the engine thread or a handler
forever; llguidance's own parser limits bound the work inside the worker as well.
Call it on the HTTP side, before the request reaches the engine, so a bad schema is
a 400 before generation.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from llguidance import LLMatcher, LLParserLimits, LLTokenizer

from mlxcel.structured.constraint import Constraint
from mlxcel.structured.errors import (
    GrammarError,
    GrammarTimeoutError,
    ResponseFormatError,
    SchemaError,
    SchemaLimitError,
    StructuredOutputError,
    one_line_reason,
    schema_free_reason,
)
from mlxcel.structured.gbnf import gbnf_to_lark
from mlxcel.structured.limits import check_schema

DEFAULT_COMPILE_TIMEOUT_S = 3.0
MAX_GRAMMAR_BYTES = 64 * 1024  # a GBNF text, as large as a schema may be

# Between JSON tokens: nothing, one space, or a newline and up to 20 spaces/tabs of
# indentation. Unbounded whitespace lets small models loop on newlines forever.
JSON_WHITESPACE = r"(?: |\n[ \t]{0,20})?"

GrammarKind = Literal["json_schema", "json_object", "tool_call", "gbnf"]


@dataclass(frozen=True)
class GrammarLimits:
    """llguidance's parser limits, tighter than its defaults where memory is concerned.
    Fuel is llguidance's unit of lexer work (~14-50k per ms)."""

    max_items_in_row: int = 2_000
    initial_lexer_fuel: int = 1_000_000  # building the lexer, once (~20 ms)
    step_lexer_fuel: int = 200_000  # one mask computation (~15 ms at worst)
    step_max_items: int = 50_000  # Earley items per mask computation
    max_lexer_states: int = 50_000  # ~1-2 kB each
    max_grammar_size: int = 200_000

    def to_llguidance(self) -> LLParserLimits:
        return LLParserLimits(
            max_items_in_row=self.max_items_in_row,
            initial_lexer_fuel=self.initial_lexer_fuel,
            step_lexer_fuel=self.step_lexer_fuel,
            step_max_items=self.step_max_items,
            max_lexer_states=self.max_lexer_states,
            max_grammar_size=self.max_grammar_size,
            verbose_errors=False,  # verbose errors print grammar and state
        )


DEFAULT_LIMITS = GrammarLimits()


@dataclass(frozen=True)
class GrammarSpec:
    """A grammar ready to compile: llguidance's serialized grammar and where it came
    from; for kind "gbnf", the GBNF text itself (converted when compiled)."""

    kind: GrammarKind
    grammar: str
    name: str | None = None


@dataclass(frozen=True)
class ResponseFormat:
    """`response_format` as Chat Completions sends it. The flattened shape of the
    Responses API `text.format` and Anthropic `output_config` ({"type": "json_schema",
    "schema": ...}) is accepted too. `name` and `strict` change nothing."""

    type: Literal["text", "json_object", "json_schema"] = "text"
    schema: dict[str, Any] | None = None
    name: str | None = None
    strict: bool | None = None

    @classmethod
    def parse(cls, value: Mapping[str, Any] | None, field: str = "response_format") -> ResponseFormat:
        """Validate the wire object (and the schema's limits); raise ResponseFormatError
        or SchemaLimitError, naming the parts as the client sent them under `field`."""
        if value is None:
            return cls()
        if not isinstance(value, Mapping):
            raise ResponseFormatError(f"{field} must be an object")
        kind = value.get("type", "text")
        if kind in ("text", None):
            return cls()
        if kind == "json_object":  # llama-server's form may carry a schema
            if value.get("schema") is None:
                return cls(type="json_object")
            return cls(type="json_schema", schema=_checked_schema(value["schema"], f"{field}.schema"))
        if kind != "json_schema":
            raise ResponseFormatError(f"{field}.type must be one of 'text', 'json_object', 'json_schema'")
        wrapped = "json_schema" in value  # chat's shape; the flattened one holds the schema itself
        where = f"{field}.json_schema" if wrapped else field
        wrapper = value["json_schema"] if wrapped else value
        if not isinstance(wrapper, Mapping):
            raise ResponseFormatError(f"{where} must be an object")
        schema = wrapper.get("schema")
        if schema is None:  # llama-server: an absent schema means any object
            return cls(type="json_object")
        schema = _checked_schema(schema, f"{where}.schema")
        name, strict = wrapper.get("name"), wrapper.get("strict")
        if name is not None and not isinstance(name, str):
            raise ResponseFormatError(f"{where}.name must be a string")
        if strict is not None and not isinstance(strict, bool):
            raise ResponseFormatError(f"{where}.strict must be a boolean")
        return cls(type="json_schema", schema=schema, name=name, strict=strict)

    @classmethod
    def from_schema(cls, schema: Any, field: str = "json_schema") -> ResponseFormat:
        """A bare JSON schema (llama-server's `json_schema` field) as a format."""
        return cls(type="json_schema", schema=_checked_schema(schema, field))

    @property
    def constrained(self) -> bool:
        return self.type != "text"

    def grammar_spec(self) -> GrammarSpec | None:
        """The grammar to compile, or None for unconstrained text."""
        if self.type == "json_object":
            return GrammarSpec("json_object", json_schema_grammar({"type": "object"}))
        if self.type == "json_schema":
            assert self.schema is not None
            return GrammarSpec("json_schema", json_schema_grammar(self.schema), self.name)
        return None


def _checked_schema(schema: Any, field: str) -> dict[str, Any]:
    """A schema within the limits; an empty one means any object, as in llama-server."""
    if not isinstance(schema, dict):
        raise ResponseFormatError(f"{field} must be an object")
    check_schema(schema)
    return schema or {"type": "object"}


def gbnf_grammar(text: str) -> GrammarSpec:
    """A GBNF grammar (llama.cpp's `grammar` field; a Lark text starting with `start:`
    or `%llguidance` passes as is), size-checked, its Lark `%json` schemas within the
    schema limits; parsed when compiled."""
    if len(text.encode("utf-8")) > MAX_GRAMMAR_BYTES:
        raise GrammarError(f"grammar is larger than {MAX_GRAMMAR_BYTES // 1024} KiB")
    _check_embedded_schemas(text)
    return GrammarSpec("gbnf", text)


EMBEDDED_SCHEMA = re.compile(r"%json\s*")


def _check_embedded_schemas(text: str) -> None:
    """The limits of a response format's schema, for each schema a Lark grammar holds
    (`%json {...}`), which llguidance compiles with the grammar: one it cannot hold
    would crash the process there. Numbers are read as doubles, as llguidance reads them."""
    decoder = json.JSONDecoder(parse_int=float)
    for found in EMBEDDED_SCHEMA.finditer(text):
        try:
            schema, _ = decoder.raw_decode(text, found.end())
        except (ValueError, RecursionError):
            continue  # not JSON: the grammar's parser says what is wrong
        try:
            check_schema(schema)
        except SchemaLimitError as exc:
            raise GrammarError(f"a %json schema in it: {exc}") from None


def json_schema_grammar(schema: dict[str, Any]) -> str:
    """llguidance's grammar for a JSON schema, with our JSON layout options (they
    override any `x-guidance` options the schema carries)."""
    options = {"whitespace_flexible": True, "whitespace_pattern": JSON_WHITESPACE, "lenient": False}
    try:
        return LLMatcher.grammar_from_json_schema(schema, overrides=options)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise SchemaError(one_line_reason(schema_free_reason(str(exc), schema))) from None


def compile_constraint(
    spec: GrammarSpec,
    lltokenizer: LLTokenizer,
    timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S,
    limits: GrammarLimits = DEFAULT_LIMITS,
) -> Constraint:
    """Compile on the worker pool and wait at most `timeout_s`; raise SchemaError with
    the engine's reason, or GrammarTimeoutError."""
    future = _pool().submit(_compile, spec, lltokenizer, limits)
    try:
        return future.result(timeout=timeout_s)
    except concurrent.futures.TimeoutError:
        future.cancel()  # a compile already running finishes within llguidance's limits
        raise _timeout(spec, timeout_s) from None


async def compile_constraint_async(
    spec: GrammarSpec,
    lltokenizer: LLTokenizer,
    timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S,
    limits: GrammarLimits = DEFAULT_LIMITS,
) -> Constraint:
    """`compile_constraint` for an asyncio handler: the event loop never blocks."""
    future = _pool().submit(_compile, spec, lltokenizer, limits)
    try:
        return await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
    except asyncio.TimeoutError:
        raise _timeout(spec, timeout_s) from None


def _timeout(spec: GrammarSpec, timeout_s: float) -> StructuredOutputError:
    if spec.kind == "gbnf":
        return GrammarError(f"compiling the grammar took longer than {timeout_s:g} s")
    return GrammarTimeoutError(timeout_s)


def _compile(spec: GrammarSpec, lltokenizer: LLTokenizer, limits: GrammarLimits) -> Constraint:
    """Build the matcher (llguidance drops the GIL meanwhile) and compute its first
    mask, which surfaces unsatisfiable schemas and pays the lexer's first-step cost.
    A GBNF text is converted here first (llguidance's front-end: Python, bounded by
    MAX_GRAMMAR_BYTES, linear in the rules)."""
    grammar = spec.grammar
    if spec.kind == "gbnf":
        try:
            grammar = LLMatcher.grammar_from_lark(gbnf_to_lark(spec.grammar))
        except ValueError as exc:
            raise GrammarError(one_line_reason(str(exc))) from None
    matcher = LLMatcher(lltokenizer, grammar, log_level=0, limits=limits.to_llguidance())
    if not matcher.is_error():
        scratch = np.empty((lltokenizer.vocab_size + 31) // 32, dtype=np.int32)
        matcher.unsafe_compute_mask_ptr(scratch.ctypes.data, scratch.nbytes)
    if matcher.is_error():
        if spec.kind == "gbnf":
            raise GrammarError(one_line_reason(matcher.get_error()))
        raise SchemaError(one_line_reason(schema_free_reason(matcher.get_error(), _schema_of(spec))))
    return Constraint(matcher, lltokenizer.vocab_size, source=spec.grammar if spec.kind == "gbnf" else "")


def _schema_of(spec: GrammarSpec) -> Any:
    """The JSON a schema grammar carries (llguidance's grammar object around the schema,
    or the schema after a tool call's `%json`), for keeping it out of an error."""
    text = spec.grammar
    if spec.kind == "tool_call":
        text = text[text.find(TOOL_CALL_SCHEMA_MARK) + len(TOOL_CALL_SCHEMA_MARK):]
    try:
        return json.JSONDecoder().raw_decode(text)[0]
    except ValueError:
        return None


TOOL_CALL_SCHEMA_MARK = "%json "


_pool_lock = threading.Lock()
_pool_instance: concurrent.futures.ThreadPoolExecutor | None = None


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    global _pool_instance
    with _pool_lock:
        if _pool_instance is None:
            _pool_instance = concurrent.futures.ThreadPoolExecutor(
                max_workers=2, thread_name_prefix="mlxcel-grammar"
            )
        return _pool_instance
