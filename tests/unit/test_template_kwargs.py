"""Chat-template kwargs: the three request shapes, their precedence, the server defaults."""

from __future__ import annotations

import pytest

from mlxcel.chat.errors import ChatInputError
from mlxcel.chat.template_kwargs import parse_kwargs_json, resolve_template_kwargs

DEFAULTS = {"enable_thinking": False, "preserve_thinking": False}


def test_no_request_kwargs_keeps_the_defaults() -> None:
    assert resolve_template_kwargs({"messages": []}, DEFAULTS) == DEFAULTS
    assert resolve_template_kwargs({"chat_template_kwargs": None}, DEFAULTS) == DEFAULTS
    assert resolve_template_kwargs({}, {}) == {}


def test_top_level_kwargs_merge_over_defaults() -> None:
    body = {"chat_template_kwargs": {"preserve_thinking": True, "new_switch": [1]}}
    assert resolve_template_kwargs(body, DEFAULTS) == {
        "enable_thinking": False,
        "preserve_thinking": True,
        "new_switch": [1],
    }


def test_extra_body_kwargs() -> None:
    body = {"extra_body": {"chat_template_kwargs": {"enable_thinking": True}}}
    assert resolve_template_kwargs(body, DEFAULTS) == {"enable_thinking": True, "preserve_thinking": False}


def test_dashscope_preserve_thinking_nested_or_flattened() -> None:
    assert resolve_template_kwargs({"extra_body": {"preserve_thinking": True}}, DEFAULTS)["preserve_thinking"] is True
    assert resolve_template_kwargs({"preserve_thinking": True}, DEFAULTS)["preserve_thinking"] is True
    body = {"preserve_thinking": False, "extra_body": {"preserve_thinking": True}}
    assert resolve_template_kwargs(body, {})["preserve_thinking"] is True


def test_first_shape_present_wins_whole() -> None:
    body = {
        "chat_template_kwargs": {"enable_thinking": True},
        "extra_body": {"chat_template_kwargs": {"preserve_thinking": True, "x": 1}, "preserve_thinking": True},
        "preserve_thinking": True,
    }
    assert resolve_template_kwargs(body, DEFAULTS) == {"enable_thinking": True, "preserve_thinking": False}
    del body["chat_template_kwargs"]
    assert resolve_template_kwargs(body, {}) == {"preserve_thinking": True, "x": 1}
    body["extra_body"] = {"chat_template_kwargs": {"y": 2}}
    body["preserve_thinking"] = True
    assert resolve_template_kwargs(body, {}) == {"y": 2}


def test_empty_top_level_kwargs_still_wins() -> None:
    body = {"chat_template_kwargs": {}, "extra_body": {"preserve_thinking": True}}
    assert resolve_template_kwargs(body, DEFAULTS) == DEFAULTS


def test_defaults_are_not_modified() -> None:
    defaults = {"a": 1}
    resolve_template_kwargs({"chat_template_kwargs": {"a": 2}}, defaults)
    assert defaults == {"a": 1}


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ({"chat_template_kwargs": [1]}, "^chat_template_kwargs must be a JSON object$"),
        ({"chat_template_kwargs": "x"}, "^chat_template_kwargs must be a JSON object$"),
        ({"extra_body": {"chat_template_kwargs": 3}}, "^extra_body.chat_template_kwargs must be a JSON object$"),
        ({"extra_body": {"preserve_thinking": "yes"}}, "^extra_body.preserve_thinking must be a boolean$"),
        ({"preserve_thinking": 1}, "^preserve_thinking must be a boolean$"),
        # the variables a render sets from the request itself (a second value was a TypeError, a 500)
        ({"chat_template_kwargs": {"add_generation_prompt": True}}, "^chat_template_kwargs cannot set 'add_gen"),
        ({"chat_template_kwargs": {"tools": [], "messages": []}}, "cannot set 'messages', 'tools': the request"),
        ({"extra_body": {"chat_template_kwargs": {"tools": []}}}, "^extra_body.chat_template_kwargs cannot set"),
    ],
)
def test_malformed_shapes_are_chat_input_errors(body: dict, match: str) -> None:
    """ChatInputError: a 400 on every API (a bare ValueError was a 500 on chat)."""
    with pytest.raises(ChatInputError, match=match):
        resolve_template_kwargs(body, DEFAULTS)


def test_a_non_object_extra_body_is_ignored() -> None:
    assert resolve_template_kwargs({"extra_body": "x"}, DEFAULTS) == DEFAULTS


def test_parse_kwargs_json() -> None:
    parsed = parse_kwargs_json('{"enable_thinking": false, "x": {"y": [1]}}')
    assert parsed == {"enable_thinking": False, "x": {"y": [1]}}
    assert parse_kwargs_json("{}") == {}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[1, 2]", "must be a JSON object, not an array"),
        ('"s"', "not a string"),
        ("true", "not a boolean"),
        ("null", "not null"),
        ("3", "not a number"),
        ("{enable_thinking: false}", "is not valid JSON"),
        ("", "is not valid JSON"),
        ('{"add_generation_prompt": false}', "cannot set 'add_generation_prompt'"),
    ],
)
def test_parse_kwargs_json_rejects_non_objects(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        parse_kwargs_json(text)
    assert "\n" not in str(info.value)
