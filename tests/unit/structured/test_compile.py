from __future__ import annotations

import asyncio
import json
import threading
import time

import numpy as np
import pytest

from mlxcel.chat.tool_parsers.json_calls import call_object_schema
from mlxcel.structured import (
    GrammarTimeoutError,
    ResponseFormat,
    SchemaError,
    compile_constraint,
    compile_constraint_async,
    mask_words,
)
from mlxcel.structured import grammar as grammar_module
from mlxcel.structured.errors import MAX_REASON_CHARS, GrammarError, schema_free_reason
from mlxcel.structured.grammar import gbnf_grammar
from mlxcel.structured.tool_call_grammar import tool_call_grammar

from .walk import lowest_allowed, random_logits, walk


def spec_for(schema: dict):
    return ResponseFormat.parse({"type": "json_schema", "json_schema": {"schema": schema}}).grammar_spec()


@pytest.mark.parametrize(
    "schema, reason",
    [
        ({"type": "strin"}, "Invalid type"),
        ({"type": "string", "pattern": "(("}, "regex"),
        ({"type": "string", "pattern": "^(?=a)b$"}, "look-around"),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}, "does not exist"),
        ({"type": "integer", "minimum": 5, "maximum": 1}, "nsatisfiable"),
        ({"type": "array", "uniqueItems": True}, "Unimplemented"),
        ({"type": "string", "format": "no-such-format"}, "format"),
        # a schema no value satisfies because its $refs only loop: llguidance's "NoExtensionBias", put in words
        ({"$ref": "#"}, "allows no finite value"),
        ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, "no finite value"),
        ({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"}, "no finite value"),
    ],
)
def test_invalid_schema_is_a_schema_error_with_reason(lltokenizer, schema, reason):
    with pytest.raises(SchemaError) as info:
        compile_constraint(spec_for(schema), lltokenizer)
    assert reason in info.value.reason
    assert json.dumps(schema) not in str(info.value)


@pytest.mark.parametrize(
    "schema, reason",
    [
        ({"type": "Secret_Type"}, "Invalid type: …"),
        ({"type": ["string", "Secret_Type"]}, "Invalid type: …"),
        ({"type": "string", "format": "secret-format"}, "Unknown format: …"),
        ({"type": "string", "pattern": "(?<=x)secret_pattern"}, "look-around"),
        ({"type": "string", "pattern": "secret  pattern\nline("}, "unclosed group"),
        ({"type": "string", "pattern": "\\p{SecretClass}"}, "Unicode property not found"),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/secret_def"}}}, "does not exist"),
        ({"$ref": "https://Secret.example/schema"}, "not present"),
        ({"type": "object", "required": ["secret_property"], "additionalProperties": False}, "nsatisfiable"),
    ],
)
def test_a_refused_schema_is_not_echoed(lltokenizer, schema, reason):
    """The spec: schema content is never echoed in errors. llguidance quotes the type,
    format, pattern, $ref or property it refuses; the reason keeps its verdict only."""
    with pytest.raises(SchemaError) as info:
        compile_constraint(spec_for(schema), lltokenizer)
    assert reason in info.value.reason
    assert "secret" not in str(info.value).lower()


def test_a_schema_string_is_blanked_only_as_a_whole_word():
    message = "Unsatisfiable schema: required property 'ab' is unsatisfiable"
    expected = "Unsatisfiable schema: required property '…' is unsatisfiable"
    assert schema_free_reason(message, {"required": ["ab"]}) == expected
    assert schema_free_reason("Invalid type: strin", {"type": "strin"}) == "Invalid type: …"
    assert schema_free_reason("Invalid type: x", {"type": "x"}) == "Invalid type: x"  # one character says nothing


def test_reason_is_truncated(lltokenizer):
    pattern = "(" + "abcdefgh" * 500  # the regex error quotes the pattern
    with pytest.raises(SchemaError) as info:
        compile_constraint(spec_for({"type": "string", "pattern": pattern}), lltokenizer)
    assert len(info.value.reason) <= MAX_REASON_CHARS
    assert pattern not in str(info.value)


def test_json_object_allows_objects_only(tokenizer, lltokenizer):
    spec = ResponseFormat.parse({"type": "json_object"}).grammar_spec()
    good = compile_constraint(spec, lltokenizer)
    for token in tokenizer.encode('{"a": [1, {"b": null}], "c": "d"}', add_special=False):
        assert good.accept(token), good.error
    assert good.is_finished()
    for text in ("[1]", '"x"', "42"):
        bad = compile_constraint(spec, lltokenizer)
        assert not bad.accept(tokenizer.encode(text, add_special=False)[0])
        assert bad.error


def test_eog_only_when_the_grammar_accepts(tokenizer, lltokenizer):
    constraint = compile_constraint(spec_for({"type": "object"}), lltokenizer)
    row = np.zeros(mask_words(tokenizer.n_vocab), dtype=np.int32)
    tokens = tokenizer.encode('{"a": 1}', add_special=False)
    for token in tokens:
        constraint.fill_mask(row)
        assert not any((row[t // 32] >> (t % 32)) & 1 for t in tokenizer.eog_tokens)
        assert constraint.accept(token)
    assert constraint.is_finished() and constraint.is_accepting()
    constraint.fill_mask(row)
    bits = np.unpackbits(row.view(np.uint8), count=tokenizer.n_vocab, bitorder="little")
    assert set(np.flatnonzero(bits).tolist()) == set(tokenizer.eog_tokens)


def test_special_tokens_never_appear_inside_strings(tokenizer, lltokenizer):
    constraint = compile_constraint(spec_for({"type": "string"}), lltokenizer)
    assert constraint.accept(tokenizer.encode('"', add_special=False)[0])
    row = np.zeros(mask_words(tokenizer.n_vocab), dtype=np.int32)
    constraint.fill_mask(row)
    im_start = tokenizer.encode("<|im_start|>", add_special=False)[0]
    assert not (row[im_start // 32] >> (im_start % 32)) & 1


def test_compilation_gives_up_after_the_timeout(lltokenizer, monkeypatch):
    release = threading.Event()

    def stuck(*_args):
        release.wait(10)
        raise SchemaError("released")

    monkeypatch.setattr(grammar_module, "_compile", stuck)
    spec = spec_for({"type": "string"})
    try:
        started = time.perf_counter()
        with pytest.raises(GrammarTimeoutError, match="longer than 0.2 s"):
            compile_constraint(spec, lltokenizer, timeout_s=0.2)
        with pytest.raises(GrammarTimeoutError):
            asyncio.run(compile_constraint_async(spec, lltokenizer, timeout_s=0.2))
        assert time.perf_counter() - started < 2.0
    finally:
        release.set()


def test_async_compile(tokenizer, lltokenizer):
    constraint = asyncio.run(compile_constraint_async(spec_for({"type": "boolean"}), lltokenizer))
    assert walk(constraint, tokenizer, lowest_allowed(tokenizer.n_vocab)) in ("true", "false")


def _big_alternation() -> str:
    words = "|".join(f"w{i}x{i * 7}" for i in range(5000))
    return f"^({words})$"


PATHOLOGICAL = {
    "dfa blow-up": {"type": "string", "pattern": "^(a|b)*a(a|b){40}$"},
    "nested repeats": {"type": "string", "pattern": "^((a{1,90}){1,90}){1,90}$"},
    "star chain": {"type": "string", "pattern": "^(.*a.*b.*c){30}$"},
    "huge alternation": {"type": "string", "pattern": _big_alternation()},
    "big enum": {"enum": [f"value-{i:05d}" for i in range(4000)]},
    "wide anyOf": {"anyOf": [{"type": "string", "pattern": f"^.*{i}.*{i + 1}$"} for i in range(300)]},
    "deep objects": json.loads('{"type":"object","properties":{"a":' * 15 + '{"type":"string"}' + "}}" * 15),
    "long minLength": {"type": "string", "minLength": 10**9},
}


@pytest.mark.parametrize("name", sorted(PATHOLOGICAL))
def test_pathological_schema_is_bounded(tokenizer, lltokenizer, piece_lengths, name):
    started = time.perf_counter()
    try:
        constraint = compile_constraint(spec_for(PATHOLOGICAL[name]), lltokenizer, timeout_s=5.0)
    except SchemaError:
        pass  # rejected by a limit: fine, as long as it is quick
    else:
        try:
            walk(constraint, tokenizer, random_logits(0, piece_lengths, short_bonus=0.0), max_steps=40)
        except AssertionError as exc:
            assert "not finished" in str(exc) or constraint.error  # a step limit stops it
    assert time.perf_counter() - started < 5.0


def test_forced_tool_call_grammar_resolves_refs_in_each_tools_parameters(tokenizer, lltokenizer):
    city = {"type": "object", "properties": {"name": {"type": "string"}, "country": {"type": "string"}},
            "required": ["name", "country"]}
    parameters = {"$defs": {"City": city}, "type": "object", "properties": {"city": {"$ref": "#/$defs/City"}},
                  "required": ["city"]}
    tools = [{"type": "function", "function": {"name": name, "parameters": parameters}} for name in ("a", "b")]

    def accepts(tools: list[dict], text: str) -> bool:
        # refs that resolved against the call object's root were a SchemaError here
        constraint = compile_constraint(tool_call_grammar(tokenizer, "", call_object_schema(tools), ""), lltokenizer)
        accepted = all(constraint.accept(token) for token in tokenizer.encode(text, add_special=False))
        return accepted and constraint.is_accepting()

    good = '{"name": "b", "arguments": {"city": {"name": "Paris", "country": "France"}}}'
    assert accepts(tools, good) and accepts(tools[1:], good)
    assert not accepts(tools, '{"name": "b", "arguments": {"city": {"name": "Paris"}}}')
    # parameters with an $id are a resource of their own: their refs resolve there already
    identified = {"type": "function", "function": {"name": "b", "parameters": {"$id": "https://example.com/b",
                                                                                **parameters}}}
    assert accepts([tools[0], identified], good) and accepts([identified], good)
    # an anchor names its subschema wherever it sits
    anchored = {"type": "function", "function": {"name": "b", "parameters": {
        "$defs": {"City": {**city, "$anchor": "city"}}, "type": "object", "properties": {"city": {"$ref": "#city"}},
        "required": ["city"]}}}
    assert accepts([tools[0], anchored], good) and not accepts([anchored], good.replace(', "country": "France"', ""))


def test_a_grammar_whose_rule_only_refers_to_itself_says_nothing_can_be_generated(lltokenizer):
    with pytest.raises(GrammarError, match="nothing can be generated"):
        compile_constraint(gbnf_grammar("root ::= root"), lltokenizer)
