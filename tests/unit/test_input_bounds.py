"""The edge checks every request body passes before any work."""

from __future__ import annotations

import json

import pytest

from mlxcel.config import RequestLimits
from mlxcel.http.input_bounds import BodyError, parse_and_check

LIMITS = RequestLimits(max_messages=5, max_tools=2, max_stop=3, max_stop_chars=8, max_logit_bias=4, max_prompts=3,
                       max_depth=16)


def check(raw: str | bytes, max_chars: int = 10_000) -> dict:
    return parse_and_check(raw.encode() if isinstance(raw, str) else raw, LIMITS, max_chars)


def rejected(raw: str | bytes, max_chars: int = 10_000) -> BodyError:
    with pytest.raises(BodyError) as info:
        check(raw, max_chars)
    return info.value


@pytest.mark.parametrize("raw", ['{"a": NaN}', '{"a": Infinity}', '{"a": [-Infinity]}', '{"a": 1e999}',
                                 '{"a": -1e400}'])
def test_non_finite_numbers_are_refused(raw):
    assert "number" in rejected(raw).message


@pytest.mark.parametrize("raw", ['{"seed": 9223372036854775808}', '{"seed": -9223372036854775809}',
                                 '{"seed": 1' + "0" * 5000 + "}"])
def test_integers_beyond_int64_are_refused(raw):
    assert "out of range" in rejected(raw).message


def test_int64_extremes_pass():
    assert check('{"seed": 9223372036854775807, "b": -9223372036854775808}')["seed"] == 2**63 - 1


@pytest.mark.parametrize("raw, where", [
    ('{"instructions": "\\ud800"}', "instructions"),
    ('{"messages": [{"role": "user", "content": "ok"}, {"content": "a\\udfffb"}]}', "messages[1].content"),
    ('{"dry_sequence_breakers": ["\\n", "\\ud800"]}', "dry_sequence_breakers[1]"),
    ('{"metadata": {"\\udc00": 1}}', "metadata: a key"),
])
def test_lone_surrogates_are_refused_naming_the_field(raw, where):
    message = rejected(raw).message
    assert message.startswith(where) and "Unicode" in message


def test_valid_unicode_and_nul_pass():
    data = check(json.dumps({"s": "caf\u00e9 \U0001F600 \u0000 \ud83d\ude00"}, ensure_ascii=True))
    assert data["s"].endswith("\U0001F600")


@pytest.mark.parametrize("depth", [17, 200, 100_000])
def test_deep_nesting_is_refused(depth):
    raw = '{"a": ' + "[" * depth + "]" * depth + "}"
    assert "nested" in rejected(raw).message


def test_a_deep_error_names_where_without_echoing_the_keys_on_the_way():
    secret = "customer_ssn_" + "x" * 200
    nested: dict = {}
    for _ in range(20):
        nested = {"properties": {secret: nested}}
    message = rejected(json.dumps({"response_format": {"schema": nested}})).message
    assert message.startswith("response_format.schema.properties.") and "nested deeper than 16" in message
    assert "levels…" in message and len(message) < 200 and secret not in message


def test_nesting_within_the_limit_passes():
    assert check('{"a": ' + "[" * 14 + "]" * 14 + "}")


def test_total_characters_are_capped_with_413():
    error = rejected(json.dumps({"messages": [{"content": "x" * 600}], "tools": ["y" * 500]}), max_chars=1000)
    assert error.status == 413 and "--max-chars" in error.message


@pytest.mark.parametrize("body, flag", [
    ({"messages": [{}] * 6}, "--max-messages"),
    ({"input": [{}] * 6}, "--max-messages"),
    ({"tools": [{}] * 3}, "--max-tools"),
    ({"stop": ["a", "b", "c", "d"]}, "--max-stop"),
    ({"stop_sequences": ["a", "b", "c", "d"]}, "--max-stop"),
    ({"stop": "x" * 9}, "--max-stop-chars"),
    ({"logit_bias": {str(i): 1 for i in range(5)}}, "--max-logit-bias"),
    ({"logit_bias": [[i, 1] for i in range(5)]}, "--max-logit-bias"),
    ({"prompt": ["a", "b", "c", "d"]}, "--max-prompts"),
    ({"prompt": [[1], [2], [3], [4]]}, "--max-prompts"),
])
def test_counted_caps_name_their_flag(body, flag):
    assert flag in rejected(json.dumps(body)).message


@pytest.mark.parametrize("body", [
    {"messages": [{}] * 5, "tools": [{}] * 2, "stop": ["a", "b", "c"]},
    {"prompt": list(range(50))},  # one prompt of token ids
    {"prompt": ["a", 1, 2, "b"]},  # one mixed prompt
    {"input": "a string input"},
])
def test_bodies_within_the_caps_pass(body):
    assert check(json.dumps(body)) == body


@pytest.mark.parametrize("raw, message", [
    ("", "empty"), ("   ", "empty"), ("[1, 2]", "JSON object"), ('"text"', "JSON object"), ("{", "malformed"),
    (b"\xff\xfe{}", "malformed"), ('{"a": 1,}', "malformed"),
])
def test_malformed_bodies(raw, message):
    assert message in rejected(raw).message
