"""Hypothesis strategies for request bodies, built from the wire models' own JSON
schemas (pydantic's `model_json_schema()`), and the mutations a hostile client adds:
wrong types at any level, unknown fields holding any JSON, JSON the standard allows
but no field means (lone surrogates, NaN and Infinity, huge numbers, deep nesting),
NUL characters, long arrays, and bodies that are not a JSON object at all.

A body is built as plain Python values, with `Raw` leaves for text that json.dumps
would never write, and serialized by `encode`. Every generation budget in a body
(`max_tokens` and its kin) is kept at 1-4 tokens, so bodies the server accepts
finish fast; mutations never touch those fields.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

# generation budgets: forced to 1-4 wherever they appear, never mutated or removed
BUDGET_KEYS = frozenset({"max_tokens", "max_completion_tokens", "n_predict", "max_output_tokens"})
TOOL_NAMES = ("get_weather", "f", "x")
N_VOCAB = 49152  # SmolLM2's vocabulary: token ids on both sides of its end


@dataclass(frozen=True)
class Raw:
    """JSON text written into the body verbatim (it may be invalid JSON on purpose)."""

    text: bytes


def encode(value: Any) -> bytes:
    """The body's bytes; `Raw` leaves go in as they are."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return b"{" + b",".join(json.dumps(k).encode() + b":" + encode(v) for k, v in value.items()) + b"}"
    if isinstance(value, list):
        return b"[" + b",".join(encode(v) for v in value) + b"]"
    return json.dumps(value).encode()  # ensure_ascii: a lone surrogate goes out as its \udXXX escape


# --- leaves ------------------------------------------------------------------

# strings that mean something to a template, a parser or a tokenizer
MARKUP = ("", " ", "\n", "\x00", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
          "{{ 7*7 }}", "{% for x in range(9) %}", "é", "\u202e", "\U0001f600", "\ufeff", "\\", '"')


def texts(max_size: int = 12) -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(max_size=max_size),
        st.sampled_from(MARKUP),
        st.lists(st.sampled_from(MARKUP), max_size=3).map("".join),
    )


def _integers(low: int | None, high: int | None) -> st.SearchStrategy[int]:
    if low is None and high is None:
        edges = st.sampled_from([0, 1, -1, 2, N_VOCAB - 1, N_VOCAB, 2**31 - 1, 2**31, 2**63 - 1, -(2**63)])
        return st.one_of(st.integers(-3, 64), st.integers(0, N_VOCAB + 8), edges)
    strategies = [st.integers(low, high)]
    if low is not None:
        strategies.append(st.integers(low, low + 8 if high is None else min(high, low + 8)))
    edges = [v for v in (low, high) if v is not None]
    strategies.append(st.sampled_from(edges))
    return st.one_of(strategies)


def _numbers(low: float | None, high: float | None) -> st.SearchStrategy[float]:
    floats = st.floats(low, high, allow_nan=False, allow_infinity=False)
    edges = [v for v in (low, high) if v is not None] or [0.0, -1.0, 1.5, 1e308]
    return st.one_of(floats, st.sampled_from(edges))


json_scalars = st.one_of(st.none(), st.booleans(), _integers(None, None),
                         st.floats(allow_nan=False, allow_infinity=False), texts())
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(texts(8), inner, max_size=3)),
    max_leaves=8,
)


# --- schema -> strategy ------------------------------------------------------

# a small JSON schema, for the fields that carry one (tool parameters, response formats)
SMALL_SCHEMA = {
    "anyOf": [
        {"const": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
        {"const": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}}}},
        {"const": {"type": "string", "enum": ["a", "b"]}},
        {"const": {"type": "object"}},
        {"const": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}},
        {"const": {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}}},
        {"const": {"type": "string", "pattern": "[a-z]+", "format": "email"}},
        {"const": {"type": 5}},
        {"type": "object", "additionalProperties": True},
    ]
}
TOOL_NAME = {"enum": list(TOOL_NAMES)}
RESPONSE_FORMAT = {
    "anyOf": [
        {"type": "object", "properties": {"type": {"enum": ["text", "json_object"]}}, "required": ["type"]},
        {"type": "object", "properties": {
            "type": {"const": "json_schema"},
            "json_schema": {"type": "object", "properties": {"name": {"type": "string"}, "schema": SMALL_SCHEMA,
                                                             "strict": {"type": "boolean"}}, "required": ["schema"]},
        }, "required": ["type", "json_schema"]},
    ]
}
ANTHROPIC_BLOCK = {
    "anyOf": [
        {"type": "object", "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
         "required": ["type", "text"]},
        {"type": "object", "properties": {"type": {"const": "tool_use"}, "id": {"type": "string"}, "name": TOOL_NAME,
                                          "input": {"type": "object"}}, "required": ["type", "name"]},
        {"type": "object", "properties": {
            "type": {"const": "tool_result"}, "tool_use_id": {"type": "string"},
            "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "object", "properties": {
                "type": {"enum": ["text", "image"]}, "text": {"type": "string"}}, "required": ["type"]}}]},
        }, "required": ["type", "tool_use_id"]},
        {"type": "object", "properties": {"type": {"enum": ["thinking", "redacted_thinking"]},
                                          "thinking": {"type": "string"}, "signature": {"type": "string"}},
         "required": ["type"]},
        {"type": "object", "properties": {"type": {"enum": ["image", "document", "server_tool_use",
                                                            "web_search_tool_result", "mystery"]}},
         "required": ["type"]},
    ]
}
RESPONSES_TEXT_PART = {"type": "object", "properties": {
    "type": {"enum": ["input_text", "output_text", "text", "refusal", "input_image", "input_file"]},
    "text": {"type": "string"}, "refusal": {"type": "string"}}, "required": ["type"]}
RESPONSES_ITEM = {
    "anyOf": [
        {"type": "object", "properties": {"role": {"enum": ["user", "assistant", "system", "developer", "tool"]},
                                          "content": {"anyOf": [{"type": "string"},
                                                                {"type": "array", "items": RESPONSES_TEXT_PART}]}},
         "required": ["role", "content"]},
        {"type": "object", "properties": {"type": {"const": "message"}, "role": {"enum": ["user", "assistant"]},
                                          "content": {"type": "array", "items": RESPONSES_TEXT_PART}},
         "required": ["type", "role", "content"]},
        {"type": "object", "properties": {"type": {"const": "function_call"}, "call_id": {"type": "string"},
                                          "name": TOOL_NAME, "arguments": {"type": "string"}},
         "required": ["type", "call_id", "name", "arguments"]},
        {"type": "object", "properties": {"type": {"const": "function_call_output"}, "call_id": {"type": "string"},
                                          "output": {"anyOf": [{"type": "string"},
                                                               {"type": "array", "items": RESPONSES_TEXT_PART}]}},
         "required": ["type", "call_id", "output"]},
        {"type": "object", "properties": {"type": {"const": "reasoning"}, "content": {"type": "array", "items": {
            "type": "object", "properties": {"type": {"const": "reasoning_text"}, "text": {"type": "string"}}}}},
         "required": ["type"]},
        {"type": "object", "properties": {"type": {"const": "compaction"}, "encrypted_content": {"type": "string"}},
         "required": ["type", "encrypted_content"]},
    ]
}
RESPONSES_TOOL = {"type": "object", "properties": {"type": {"enum": ["function", "web_search"]}, "name": TOOL_NAME,
                                                   "parameters": SMALL_SCHEMA, "strict": {"type": "boolean"}},
                  "required": ["type", "name"]}
RESPONSES_TOOL_CHOICE = {"anyOf": [
    {"enum": ["none", "auto", "required"]},
    {"type": "object", "properties": {"type": {"const": "function"}, "name": TOOL_NAME}, "required": ["type"]},
    {"type": "object", "properties": {"type": {"const": "allowed_tools"}, "mode": {"enum": ["auto", "required"]},
                                      "tools": {"type": "array", "items": {"type": "object", "properties": {
                                          "type": {"const": "function"}, "name": TOOL_NAME}}}},
     "required": ["type"]},
]}
EFFORT = {"type": "object", "properties": {"effort": {"enum": ["none", "low", "medium", "high"]}}}

# shapes the wire models leave loose (`dict[str, Any]`, any `str`, any `int`), keyed
# by the (model title, field) they refine: drawn instead of the model's own schema,
# so the translation code behind a loose field is reached (values of other shapes
# come from the mutations)
HINTS: dict[tuple[str, str], dict] = {
    ("ChatCompletionRequest", "tool_choice"): {"anyOf": [
        {"enum": ["none", "auto", "required"]},
        {"type": "object", "properties": {"type": {"const": "function"},
                                          "function": {"type": "object", "properties": {"name": TOOL_NAME}}},
         "required": ["type", "function"]}]},
    ("ChatCompletionRequest", "reasoning"): EFFORT,
    ("ChatCompletionRequest", "reasoning_effort"): {"enum": ["none", "low", "high"]},
    ("ContentPart", "type"): {"enum": ["text", "input_text", "image_url", "refusal"]},
    ("FunctionDefinition", "name"): TOOL_NAME,
    ("FunctionDefinition", "parameters"): SMALL_SCHEMA,
    ("FunctionCall", "name"): TOOL_NAME,
    ("FunctionCall", "arguments"): {"enum": ["{}", '{"city": "Paris"}', "[1]", "not json", ""]},
    ("AnthropicMessage", "content"): {"type": "array", "items": ANTHROPIC_BLOCK},
    ("AnthropicTool", "name"): TOOL_NAME,
    ("AnthropicTool", "input_schema"): SMALL_SCHEMA,
    ("ResponsesRequest", "input"): {"anyOf": [
        {"type": "string", "minLength": 1}, {"type": "array", "items": RESPONSES_ITEM, "minItems": 1, "maxItems": 4}]},
    ("ResponsesRequest", "tools"): {"type": "array", "items": RESPONSES_TOOL, "maxItems": 2},
    ("ResponsesRequest", "tool_choice"): RESPONSES_TOOL_CHOICE,
    ("ResponsesRequest", "text"): {"type": "object", "properties": {"format": {"anyOf": [
        {"type": "object", "properties": {"type": {"enum": ["text", "json_object"]}}},
        {"type": "object", "properties": {"type": {"const": "json_schema"}, "name": {"type": "string"},
                                          "schema": SMALL_SCHEMA}, "required": ["type", "schema"]}]}}},
    ("ResponsesRequest", "reasoning"): EFFORT,
    ("ResponsesRequest", "truncation"): {"enum": ["disabled", "auto"]},
    ("ResponsesRequest", "previous_response_id"): {"enum": ["resp_missing", ""]},
    ("ResponsesRequest", "conversation"): {"anyOf": [{"const": "conv_fuzz"},
                                                     {"type": "object", "properties": {"id": {"type": "string"}}}]},
}
SAMPLING_HINTS = {
    "logit_bias": {"anyOf": [
        {"type": "array", "maxItems": 3, "items": {"type": "array", "prefixItems": [
            {"type": "integer", "minimum": 0, "maximum": N_VOCAB + 1},
            {"anyOf": [{"type": "number", "minimum": -100, "maximum": 100}, {"type": "boolean"}]}]}},
        {"type": "object", "additionalProperties": False, "properties": {
            "0": {"type": "number"}, "42": {"const": False}, "49151": {"type": "boolean"}, "7": {"const": -100}}}]},
    "dry_sequence_breakers": {"type": "array", "maxItems": 4, "items": {"anyOf": [
        {"enum": list(MARKUP)}, {"type": "integer", "minimum": 0, "maximum": N_VOCAB}]}},
    "stop": {"anyOf": [{"enum": list(MARKUP)}, {"type": "array", "maxItems": 3, "items": {"enum": list(MARKUP)}}]},
}
for _title in ("ChatCompletionRequest", "CompletionRequest", "NativeCompletionRequest", "CountTokensRequest",
               "MessagesRequest", "ResponsesRequest", "CompactRequest"):
    for _field, _hint in SAMPLING_HINTS.items():
        HINTS[(_title, _field)] = _hint
HINTS[("ContextManagement", "type")] = {"enum": ["compaction"]}
# optional fields a body of that model carries every time
ALWAYS = {("ResponsesRequest", "input"), ("CompactRequest", "input")}
# `stream` always present (true or false): half the generating bodies stream
ALWAYS |= {(title, "stream") for title in ("ChatCompletionRequest", "CompletionRequest", "NativeCompletionRequest",
                                           "MessagesRequest", "ResponsesRequest")}
for _title in ("CountTokensRequest", "MessagesRequest"):
    HINTS[(_title, "tool_choice")] = {"anyOf": [
        {"type": "object", "properties": {"type": {"enum": ["auto", "any", "none"]}}, "required": ["type"]},
        {"type": "object", "properties": {"type": {"const": "tool"}, "name": TOOL_NAME}, "required": ["type"]}]}
    HINTS[(_title, "system")] = {"type": "array", "items": ANTHROPIC_BLOCK, "maxItems": 2}
HINTS[("MessagesRequest", "output_config")] = {"type": "object", "properties": {"format": {
    "type": "object", "properties": {"type": {"const": "json_schema"}, "schema": SMALL_SCHEMA}}}}
for _title in ("ChatCompletionRequest", "CompletionRequest", "NativeCompletionRequest", "MessagesRequest"):
    HINTS[(_title, "response_format")] = RESPONSE_FORMAT
for _field in ("tools", "tool_choice", "text"):
    HINTS[("CompactRequest", _field)] = HINTS[("ResponsesRequest", _field)]
for _field in ("conversation", "previous_response_id", "stream"):  # compact refuses each
    HINTS[("CompactRequest", _field)] = {"enum": [None, False]}
# compaction needs earlier turns to summarize
HINTS[("CompactRequest", "input")] = {"anyOf": [
    {"type": "array", "items": RESPONSES_ITEM, "minItems": 2, "maxItems": 4},
    {"const": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
               {"role": "user", "content": "Bye"}]}]}
for _title in ("CompletionRequest", "NativeCompletionRequest"):  # token ids near the vocabulary
    HINTS[(_title, "prompt")] = {"anyOf": [
        {"type": "string", "minLength": 1},
        {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": N_VOCAB - 1}, "minItems": 1,
         "maxItems": 6},
        {"type": "array", "items": {"anyOf": [{"type": "string", "minLength": 1}, {"type": "integer", "minimum": 0,
                                                                                    "maximum": N_VOCAB - 1}]},
         "minItems": 1, "maxItems": 3}]}


class SchemaStrategies:
    """Strategies for the values one JSON schema (with its `$defs`) describes."""

    def __init__(self, root: dict, hints: dict[tuple[str, str], dict] | None = None) -> None:
        self.defs = root.get("$defs", {})
        self.hints = HINTS if hints is None else hints

    def resolve(self, schema: dict) -> dict:
        while "$ref" in schema:
            ref = schema["$ref"]
            name = ref.rsplit("/", 1)[-1]
            if name not in self.defs:  # a dangling reference: any JSON
                return {}
            schema = self.defs[name]
        return schema

    def of(self, schema: dict, max_items: int = 3) -> st.SearchStrategy:
        schema = self.resolve(schema)
        if "const" in schema:
            return st.just(schema["const"])
        if "enum" in schema:
            return st.sampled_from(schema["enum"])
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return st.one_of([st.deferred(lambda s=s: self.of(s, max_items)) for s in schema[key]])
        kind = schema.get("type")
        if isinstance(kind, list):
            return st.one_of([self.of({**schema, "type": k}, max_items) for k in kind])
        if kind == "string":
            low, high = schema.get("minLength", 0), schema.get("maxLength")
            return texts(12).filter(lambda s: len(s) >= low and (high is None or len(s) <= high)) \
                if low or high is not None else texts(12)
        if kind == "integer":
            return _integers(schema.get("minimum"), schema.get("maximum"))
        if kind == "number":
            return _numbers(schema.get("minimum"), schema.get("maximum"))
        if kind == "boolean":
            return st.booleans()
        if kind == "null":
            return st.none()
        if kind == "array" and "prefixItems" in schema:
            return st.tuples(*(self.of(s, max_items) for s in schema["prefixItems"])).map(list)
        if kind == "array":
            items = schema.get("items", {})
            low = schema.get("minItems", 0)
            high = min(schema.get("maxItems", max_items), max(low, max_items))
            return st.lists(st.deferred(lambda: self.of(items, max_items)), min_size=low, max_size=high)
        if kind == "object" or "properties" in schema:
            return self.object(schema, max_items)
        return json_values  # {} or an unknown type: any JSON

    def object(self, schema: dict, max_items: int) -> st.SearchStrategy[dict]:
        title = schema.get("title", "")
        properties = schema.get("properties", {})
        required = set(schema.get("required", ()))
        extra = schema.get("additionalProperties", True)

        def field(name: str, sub: dict) -> st.SearchStrategy:
            hint = self.hints.get((title, name))
            return st.deferred(lambda: self.of(sub if hint is None else hint, max_items))

        fields = {name: field(name, sub) for name, sub in properties.items()}

        @st.composite
        def build(draw) -> dict:
            out = {}
            for name, strategy in fields.items():
                # a quarter of the optional fields, so a body is not all sampling knobs
                if name in required or (title, name) in ALWAYS or draw(st.integers(0, 3)) == 3:
                    out[name] = draw(strategy)
            if isinstance(extra, dict):
                out.update(draw(st.dictionaries(texts(8), self.of(extra, max_items), max_size=2)))
            elif extra is not False and not properties:
                out.update(draw(st.dictionaries(texts(8), json_values, max_size=2)))
            return out

        return build()


def force_budgets(value: Any, budget: int) -> Any:
    """`value` with every generation budget, at any depth, set to `budget`."""
    if isinstance(value, dict):
        return {k: budget if k in BUDGET_KEYS else force_budgets(v, budget) for k, v in value.items()}
    if isinstance(value, list):
        return [force_budgets(v, budget) for v in value]
    return value


def valid_bodies(model, budget_field: str | None) -> st.SearchStrategy[dict]:
    """Bodies drawn from `model`'s JSON schema (and the HINTS): mostly what it
    accepts, with budgets of 1-4 tokens and `budget_field` always set."""
    strategies = SchemaStrategies(model.model_json_schema())

    @st.composite
    def build(draw) -> dict:
        body = draw(strategies.of(model.model_json_schema()))
        budget = draw(st.integers(1, 4))
        body = force_budgets(body, budget)
        if budget_field is not None:
            body[budget_field] = budget
        return body

    return build()


# --- mutations ---------------------------------------------------------------

DEEP_200 = Raw(b"[" * 200 + b"]" * 200)
HOSTILE_RAW = (
    Raw(b"NaN"), Raw(b"Infinity"), Raw(b"-Infinity"), Raw(b"1e999"), Raw(b"-1e999"), Raw(b"1e-400"), Raw(b"-0"),
    Raw(str(10**30).encode()), Raw(b"9" * 5000), Raw(b"-" + b"9" * 40), Raw(b"1" + b"0" * 400 + b".5"),
    Raw(b'"\\ud800"'), Raw(b'"a\\udfffb"'), Raw(b'"\\udbff\\udbff"'), Raw(b'"\xed\xa0\x80"'), Raw(b'"\xff\xfe"'),
    Raw(b'"\\u0000"'), Raw(b'"\x00"'), Raw(b'{"a": NaN}'), Raw(b"[Infinity]"), DEEP_200,
    Raw(b'{"a":' * 150 + b"1" + b"}" * 150), Raw(b"[" * 5000 + b"]" * 5000),
)
WRONG_TYPES = st.one_of(
    json_scalars, st.lists(json_scalars, max_size=3), st.dictionaries(texts(8), json_scalars, max_size=3),
    st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3),  # lone surrogates
)


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a body a mutation may touch (never a budget field)."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            if k not in BUDGET_KEYS:
                out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def _replace(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replace(value[head], rest, new)}
    copy = list(value)
    copy[head] = _replace(value[head], rest, new)
    return copy


def _remove(value: Any, path: tuple) -> Any:
    *parent_path, last = path
    parent = value
    for key in parent_path:
        parent = parent[key]
    if isinstance(parent, dict):
        new_parent = {k: v for k, v in parent.items() if k != last}
    else:
        new_parent = [v for i, v in enumerate(parent) if i != last]
    return _replace(value, tuple(parent_path), new_parent)


def _get(value: Any, path: tuple) -> Any:
    for key in path:
        value = value[key]
    return value


# a third of the bodies go unmutated: valid bodies reach the translation and the engine
MUTATIONS = ("none", "none", "none", "none", "wrong_type", "wrong_type", "remove", "extra_field", "raw", "raw",
             "long_array", "long_string", "body")


@st.composite
def hostile_bodies(draw, model, budget_field: str | None) -> bytes:
    """The bytes of a body from `model`'s schema, then (most of the time) mutated."""
    body = draw(valid_bodies(model, budget_field))
    mutation = draw(st.sampled_from(MUTATIONS))
    paths = _paths(body)
    if mutation == "wrong_type" and len(paths) > 1:  # the whole body: the "body" mutation
        body = _replace(body, draw(st.sampled_from(paths[1:])), draw(WRONG_TYPES))
    elif mutation == "remove" and len(paths) > 1:
        body = _remove(body, draw(st.sampled_from(paths[1:])))
    elif mutation == "extra_field":
        objects = [p for p in paths if isinstance(_get(body, p), dict)]
        path = draw(st.sampled_from(objects))
        key = draw(st.one_of(texts(8), st.sampled_from(["extra_body", "chat_template_kwargs", "preserve_thinking",
                                                         "__proto__", "model_config", "stream"])))
        target = _get(body, path)
        if not (path == () and key in BUDGET_KEYS):
            body = _replace(body, path, {**target, key: draw(st.one_of(json_values, WRONG_TYPES))})
    elif mutation == "raw":
        body = _replace(body, draw(st.sampled_from(paths[1:] or paths)), draw(st.sampled_from(HOSTILE_RAW)))
    elif mutation == "long_array":
        path = draw(st.sampled_from(paths[1:] or paths))
        current = _get(body, path)
        element = current[0] if isinstance(current, list) and current else draw(json_scalars)
        # past the counted caps of 64 (stop strings, breakers, prompts) and 4096 (messages,
        # logit_bias); no length between, which as a token prompt is a long prefill
        body = _replace(body, path, [element] * draw(st.sampled_from([65, 10_000])))
    elif mutation == "long_string":
        path = draw(st.sampled_from(paths[1:] or paths))
        # 10k special tokens, not 100k: llama.cpp splits out special tokens in quadratic
        # time (100k of them tokenize for ~25 s), a cost known and not worth replaying here
        piece = draw(st.sampled_from(["a", "\x00", "é", "<|im_end|>"]))
        body = _replace(body, path, piece * draw(st.sampled_from([1025, 10_000 if piece == "<|im_end|>" else 100_000])))
    raw = encode(body)
    if mutation == "body":
        kind = draw(st.sampled_from(["truncate", "array", "scalar", "empty", "bytes", "bom"]))
        if kind == "truncate":
            raw = raw[: draw(st.integers(0, max(0, len(raw) - 1)))]
        elif kind == "array":
            raw = b"[" + raw + b"]"
        elif kind == "scalar":
            raw = draw(st.sampled_from([b"1", b'"text"', b"null", b"true", b"NaN"]))
        elif kind == "empty":
            raw = draw(st.sampled_from([b"", b" ", b"\n\n"]))
        elif kind == "bytes":
            at = draw(st.integers(0, len(raw)))
            raw = raw[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00"])) + raw[at:]
        else:
            raw = b"\xef\xbb\xbf" + raw
    return raw
