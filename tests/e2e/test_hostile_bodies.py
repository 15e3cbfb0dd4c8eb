"""A corpus of hostile request bodies: each gets its exact 4xx in the spec's error
shape (Anthropic's on /v1/messages*), and the server is healthy after each. Bodies
are written as JSON text, so what json.dumps never writes (NaN, Infinity, lone
surrogates, 5,000-digit integers, invalid UTF-8) goes out as a hostile client sends it."""

from __future__ import annotations

import json

import pytest

from mlxcel.http.errors import is_anthropic_path
from tests.e2e.fuzz_client import REQUEST_TIMEOUT_S, error_shape_problem, problems, send

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"
HI = '[{"role": "user", "content": "hi"}]'
TOOLS = '[{"type": "function", "function": {"name": "x", "parameters": {"type": "object"}}}]'


def chat(extra: str, messages: str = HI) -> bytes:
    return f'{{"messages": {messages}, "max_tokens": 2{extra}}}'.encode()


def completion(extra: str) -> bytes:
    return f'{{"prompt": "hi", "n_predict": 2{extra}}}'.encode()


def anthropic(extra: str, messages: str = HI) -> bytes:
    return f'{{"messages": {messages}, "max_tokens": 2{extra}}}'.encode()


def responses(extra: str, input: str = '"hi"') -> bytes:
    return f'{{"input": {input}, "max_output_tokens": 2{extra}}}'.encode()


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def many(item: str, n: int = 10_000) -> str:
    return "[" + ",".join([item] * n) + "]"


ENUM_FORMAT = b'{"type": "json_schema", "json_schema": {"schema": {"type": "string", "enum": ["a", "b"]}}}'
HUGE = str(10**30)
DIGITS_5000 = "9" * 5000

# (id, path, body, status)
CASES = [
    # the cases the issue names
    ("dry-breaker-lone-surrogate", CHAT, chat(', "dry_multiplier": 0.8, "dry_sequence_breakers": ["\\ud800"]'), 400),
    ("repeat-penalty-infinity", "/completion", completion(', "repeat_penalty": Infinity'), 400),
    ("logit-bias-short-pair-chat", CHAT, chat(', "logit_bias": [[1]]'), 400),
    ("logit-bias-short-pair-native", "/completion", completion(', "logit_bias": [[1]]'), 400),
    ("tool-choice-function-string", CHAT,
     chat(f', "tools": {TOOLS}, "tool_choice": {{"type": "function", "function": "x"}}'), 400),
    ("tool-choice-function-string-no-tools", CHAT, chat(', "tool_choice": {"type": "function", "function": "x"}'), 400),
    ("responses-instructions-lone-surrogate", RESPONSES, responses(', "instructions": "\\ud800"'), 400),
    # lone surrogates elsewhere, and one UTF-8-encoded (invalid UTF-8)
    ("lone-surrogate-content", CHAT, chat("", '[{"role": "user", "content": "a\\udfffb"}]'), 400),
    ("lone-surrogate-key", CHAT, chat(', "\\ud800": 1'), 400),
    ("lone-surrogate-stop", CHAT, chat(', "stop": ["\\udbff"]'), 400),
    ("lone-surrogate-anthropic-system", MESSAGES, anthropic(', "system": "\\ud800"'), 400),
    ("lone-surrogate-tokenize", "/tokenize", b'{"content": "\\ud800"}', 400),
    ("surrogate-as-utf8-bytes", CHAT,
     b'{"messages": [{"role": "user", "content": "\xed\xa0\x80"}], "max_tokens": 2}', 400),
    # NaN, Infinity and numbers beyond any field's range
    ("nan-temperature", CHAT, chat(', "temperature": NaN'), 400),
    ("minus-infinity-top-p", "/v1/completions", b'{"prompt": "hi", "max_tokens": 2, "top_p": -Infinity}', 400),
    ("float-overflow", CHAT, chat(', "temperature": 1e999'), 400),
    ("nan-inside-logit-bias", CHAT, chat(', "logit_bias": {"1": NaN}'), 400),
    ("infinity-anthropic", MESSAGES, anthropic(', "temperature": Infinity'), 400),
    ("infinity-responses", RESPONSES, responses(', "top_p": Infinity'), 400),
    ("int-1e30-max-tokens", CHAT, f'{{"messages": {HI}, "max_tokens": {HUGE}}}'.encode(), 400),
    ("int-1e30-seed", CHAT, chat(f', "seed": {HUGE}'), 400),
    ("int-5000-digits-seed", "/completion", completion(f', "seed": {DIGITS_5000}'), 400),
    ("int-5000-digits-negative", CHAT, chat(f', "top_k": -{DIGITS_5000}'), 400),
    ("int-5000-digits-token", "/detokenize", f'{{"tokens": [{DIGITS_5000}]}}'.encode(), 400),
    ("int-1e30-anthropic-max-tokens", MESSAGES, f'{{"messages": {HI}, "max_tokens": {HUGE}}}'.encode(), 400),
    ("float-400-digits", CHAT, chat(', "temperature": 1' + "0" * 400 + ".5"), 400),
    ("int-int64-overflow-prompt", "/completion", b'{"prompt": [9223372036854775808], "n_predict": 2}', 400),
    ("int-beyond-int32-repeat-last-n", "/completion", completion(', "repeat_last_n": 2147483648'), 400),
    # deep nesting
    ("depth-200-messages", CHAT, f'{{"messages": {deep(200)}, "max_tokens": 2}}'.encode(), 400),
    ("depth-200-extra-field", CHAT, chat(f', "extra": {deep(200)}'), 400),
    ("depth-200-objects", CHAT, chat(', "metadata": ' + '{"a": ' * 200 + "1" + "}" * 200), 400),
    ("depth-100000-messages", CHAT, f'{{"messages": {deep(100_000)}}}'.encode(), 400),
    ("depth-100000-anthropic", MESSAGES, anthropic(f', "metadata": {deep(100_000)}'), 400),
    ("depth-100000-responses", RESPONSES, responses(f', "metadata": {deep(100_000)}'), 400),
    ("depth-100000-body", "/completion", deep(100_000).encode(), 400),
    # wrong types at every level of a chat request
    ("messages-object", CHAT, b'{"messages": {"role": "user", "content": "hi"}, "max_tokens": 2}', 400),
    ("messages-string", CHAT, b'{"messages": "hi", "max_tokens": 2}', 400),
    ("messages-empty", CHAT, b'{"messages": [], "max_tokens": 2}', 400),
    ("messages-missing", CHAT, b'{"max_tokens": 2}', 400),
    ("message-null", CHAT, chat("", "[null]"), 400),
    ("message-number", CHAT, chat("", "[5]"), 400),
    ("message-array", CHAT, chat("", '[["user", "hi"]]'), 400),
    ("role-missing", CHAT, chat("", '[{"content": "hi"}]'), 400),
    ("role-number", CHAT, chat("", '[{"role": 1, "content": "hi"}]'), 400),
    ("role-unknown", CHAT, chat("", '[{"role": "wizard", "content": "hi"}]'), 400),
    ("content-number", CHAT, chat("", '[{"role": "user", "content": 5}]'), 400),
    ("content-object", CHAT, chat("", '[{"role": "user", "content": {"text": "hi"}}]'), 400),
    ("content-part-number", CHAT, chat("", '[{"role": "user", "content": [5]}]'), 400),
    ("content-part-type-missing", CHAT, chat("", '[{"role": "user", "content": [{"text": "hi"}]}]'), 400),
    ("content-part-type-number", CHAT, chat("", '[{"role": "user", "content": [{"type": 5, "text": "hi"}]}]'), 400),
    ("content-part-type-unknown", CHAT, chat("", '[{"role": "user", "content": [{"type": "hologram"}]}]'), 400),
    ("content-part-text-number", CHAT, chat("", '[{"role": "user", "content": [{"type": "text", "text": 5}]}]'), 400),
    ("content-part-text-missing", CHAT, chat("", '[{"role": "user", "content": [{"type": "text"}]}]'), 400),
    ("message-without-content", CHAT, chat("", '[{"role": "user"}]'), 400),
    ("dry-run-string", CHAT, chat(', "dry_run": "yes"'), 400),
    ("content-part-image", CHAT,
     chat("", '[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]'), 400),
    ("name-number", CHAT, chat("", '[{"role": "user", "content": "hi", "name": 5}]'), 400),
    ("tool-calls-string", CHAT, chat("", '[{"role": "assistant", "content": "", "tool_calls": "x"}]'), 400),
    ("tool-call-function-missing", CHAT, chat("", '[{"role": "assistant", "tool_calls": [{"id": "a"}]}]'), 400),
    ("tool-call-arguments-number", CHAT,
     chat("", '[{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 5}}]}]'), 400),
    ("tools-string", CHAT, chat(', "tools": "x"'), 400),
    ("tools-object", CHAT, chat(', "tools": {"type": "function"}'), 400),
    ("tool-number", CHAT, chat(', "tools": [5]'), 400),
    ("tool-function-number", CHAT, chat(', "tools": [{"type": "function", "function": 5}]'), 400),
    ("tool-name-empty", CHAT, chat(', "tools": [{"type": "function", "function": {"name": ""}}]'), 400),
    ("tool-parameters-string", CHAT,
     chat(', "tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]'), 400),
    ("tool-parameters-not-a-schema", CHAT, chat(', "tools": [{"type": "function", "function": {"name": "f", '
                                                 '"parameters": {"type": "bogus"}}}], "tool_choice": "required"'), 400),
    ("anthropic-input-schema-not-a-schema", MESSAGES,
     anthropic(', "tools": [{"name": "f", "input_schema": {"type": "object", "required": "a"}}]'), 400),
    ("responses-parameters-not-a-schema", RESPONSES,
     responses(', "tools": [{"type": "function", "name": "f", "parameters": {"type": "bogus"}}]'), 400),
    ("tool-choice-number", CHAT, chat(', "tool_choice": 5'), 400),
    ("tool-choice-unknown-string", CHAT, chat(', "tool_choice": "sometimes"'), 400),
    ("tool-choice-name-number", CHAT,
     chat(f', "tools": {TOOLS}, "tool_choice": {{"type": "function", "function": {{"name": 5}}}}'), 400),
    ("stream-string", CHAT, chat(', "stream": "yes please"'), 400),
    ("stream-options-number", CHAT, chat(', "stream": true, "stream_options": 5'), 400),
    ("response-format-string", CHAT, chat(', "response_format": "json"'), 400),
    ("response-format-schema-number", CHAT,
     chat(', "response_format": {"type": "json_schema", "json_schema": {"schema": 5}}'), 400),
    ("stop-number", CHAT, chat(', "stop": 5'), 400),
    ("stop-list-of-numbers", CHAT, chat(', "stop": [1, 2]'), 400),
    ("logit-bias-string", CHAT, chat(', "logit_bias": "x"'), 400),
    ("logit-bias-bias-not-a-number", CHAT, chat(', "logit_bias": {"hello": "x"}'), 400),
    ("logit-bias-token-out-of-vocab", CHAT, chat(', "logit_bias": {"49152": 1}'), 400),
    ("logit-bias-triple", CHAT, chat(', "logit_bias": [[1, 2, 3]]'), 400),
    ("dry-breakers-object", CHAT, chat(', "dry_multiplier": 0.8, "dry_sequence_breakers": {"a": 1}'), 400),
    ("dry-breakers-empty", "/completion", completion(', "dry_multiplier": 1, "dry_sequence_breakers": []'), 400),
    ("grammar-lazy", "/completion", completion(', "grammar": "root ::= [a-z]+", "grammar_lazy": true'), 400),
    ("grammar-lazy-string", CHAT, chat(', "grammar_lazy": "yes"'), 400),
    ("dry-breaker-token-out-of-vocab", CHAT, chat(', "dry_multiplier": 0.8, "dry_sequence_breakers": [-1]'), 400),
    ("chat-template-kwargs-list", CHAT, chat(', "chat_template_kwargs": [1]'), 400),
    ("extra-body-template-kwargs-number", CHAT, chat(', "extra_body": {"chat_template_kwargs": 5}'), 400),
    # kwargs naming what every render sets from the request (a TypeError, a 500, on every template route)
    ("template-kwargs-generation-prompt", CHAT, chat(', "chat_template_kwargs": {"add_generation_prompt": true}'), 400),
    ("template-kwargs-tools", CHAT, chat(', "chat_template_kwargs": {"tools": []}'), 400),
    ("apply-template-kwargs-tools", "/apply-template", chat(', "chat_template_kwargs": {"tools": []}'), 400),
    ("anthropic-template-kwargs-generation-prompt", MESSAGES,
     anthropic(', "chat_template_kwargs": {"add_generation_prompt": false}'), 400),
    ("count-tokens-template-kwargs-tools", "/v1/messages/count_tokens",
     anthropic(', "chat_template_kwargs": {"tools": []}'), 400),
    ("responses-template-kwargs-messages", RESPONSES, responses(', "chat_template_kwargs": {"messages": []}'), 400),
    ("preserve-thinking-string", CHAT, chat(', "preserve_thinking": "yes"'), 400),
    ("extra-body-preserve-thinking-number", CHAT, chat(', "extra_body": {"preserve_thinking": 1}'), 400),
    ("max-tokens-string", CHAT, f'{{"messages": {HI}, "max_tokens": "many"}}'.encode(), 400),
    ("max-tokens-below-minus-one", CHAT, f'{{"messages": {HI}, "max_tokens": -2}}'.encode(), 400),
    ("min-count-huge", CHAT, chat(', "min_count": 1e9'), 400),
    ("repeat-penalty-zero-with-grammar", "/v1/completions",
     b'{"prompt": "0", "max_tokens": 2, "repetition_penalty": 0, "response_format": ' + ENUM_FORMAT + b"}", 400),
    ("repeat-penalty-zero-in-float32", "/completion", completion(', "repeat_penalty": 1e-250'), 400),
    ("repeat-penalty-negative", CHAT, chat(', "repeat_penalty": -1'), 400),
    # the other APIs' wrong types
    ("prompt-object", "/v1/completions", b'{"prompt": {"a": 1}, "max_tokens": 2}', 400),
    ("prompt-nested-wrong", "/completion", b'{"prompt": [[1, ["a"]]], "n_predict": 2}', 400),
    ("prompt-nested-strings", "/completion", b'{"prompt": [["a", "b"]], "n_predict": 2}', 400),
    ("prompt-token-out-of-vocab", "/completion", b'{"prompt": [1, 49152], "n_predict": 2}', 400),
    ("prompt-negative-token", "/completion", b'{"prompt": [-1], "n_predict": 2}', 400),
    ("prompt-empty-list", "/completion", b'{"prompt": [], "n_predict": 2}', 400),
    ("tokenize-content-number", "/tokenize", b'{"content": 5}', 400),
    ("detokenize-tokens-string", "/detokenize", b'{"tokens": "1,2"}', 400),
    ("detokenize-token-float", "/detokenize", b'{"tokens": [1.5]}', 400),
    ("anthropic-content-number", MESSAGES, anthropic("", '[{"role": "user", "content": 5}]'), 400),
    ("anthropic-role-system", MESSAGES, anthropic("", '[{"role": "system", "content": "hi"}]'), 400),
    ("anthropic-block-without-type", MESSAGES, anthropic("", '[{"role": "user", "content": [{"text": "hi"}]}]'), 400),
    ("anthropic-block-number", MESSAGES, anthropic("", '[{"role": "user", "content": [5]}]'), 400),
    ("anthropic-block-text-number", MESSAGES,
     anthropic("", '[{"role": "user", "content": [{"type": "text", "text": 5}]}]'), 400),
    ("anthropic-tool-result-no-id", MESSAGES,
     anthropic("", '[{"role": "user", "content": [{"type": "tool_result"}]}]'), 400),
    ("anthropic-tool-use-input-string", MESSAGES,
     anthropic("", '[{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": "x"}]}]'), 400),
    ("anthropic-system-number", MESSAGES, anthropic(', "system": 5'), 400),
    ("anthropic-text-block-without-text", MESSAGES,
     anthropic("", '[{"role": "user", "content": [{"type": "text"}]}]'), 400),
    ("anthropic-system-block-without-text", MESSAGES, anthropic(', "system": [{"type": "text"}]'), 400),
    ("anthropic-system-block-image", MESSAGES, anthropic(', "system": [{"type": "image"}]'), 400),
    ("anthropic-system-block-type-list", MESSAGES, anthropic(', "system": [{"type": []}]'), 400),
    ("anthropic-tool-result-part-type-object", MESSAGES,
     anthropic("", '[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", '
                   '"content": [{"type": {"a": 1}}]}]}]'), 400),
    ("anthropic-tools-string", MESSAGES, anthropic(', "tools": "x"'), 400),
    ("anthropic-tool-choice-string", MESSAGES, anthropic(', "tool_choice": "auto"'), 400),
    ("anthropic-tool-choice-unknown", MESSAGES, anthropic(', "tool_choice": {"type": "sometimes"}'), 400),
    ("anthropic-tool-choice-name-number", MESSAGES, anthropic(', "tool_choice": {"type": "tool", "name": 5}'), 400),
    ("anthropic-thinking-string", MESSAGES, anthropic(', "thinking": "on"'), 400),
    ("anthropic-max-tokens-missing", MESSAGES, f'{{"messages": {HI}}}'.encode(), 400),
    ("anthropic-output-format-number", MESSAGES, anthropic(', "output_config": {"format": 5}'), 400),
    ("count-tokens-messages-object", "/v1/messages/count_tokens", b'{"messages": {"role": "user"}}', 400),
    ("responses-input-number", RESPONSES, responses("", "5"), 400),
    ("responses-item-number", RESPONSES, responses("", "[5]"), 400),
    ("responses-item-content-number", RESPONSES, responses("", '[{"role": "user", "content": 5}]'), 400),
    ("responses-item-type-unknown", RESPONSES, responses("", '[{"type": "hologram"}]'), 400),
    ("responses-tools-string", RESPONSES, responses(', "tools": "x"'), 400),
    ("responses-tool-choice-number", RESPONSES, responses(', "tool_choice": 5'), 400),
    ("responses-conversation-id-huge", RESPONSES, responses(f', "conversation": "{"c" * 200_000}"'), 400),
    ("anthropic-tool-without-input-schema", MESSAGES, anthropic(', "tools": [{"name": "f"}]'), 400),
    ("responses-text-string", RESPONSES, responses(', "text": "x"'), 400),
    ("responses-text-format-number", RESPONSES, responses(', "text": {"format": 5}'), 400),
    ("responses-background-stream", RESPONSES, responses(', "background": true, "stream": true'), 400),
    # two leading system messages, one with an image: joined as parts, then refused by a text-only model (was a 500)
    ("responses-system-media-joined", RESPONSES, responses("", '[{"role": "system", "content": "a"}, '
     '{"role": "developer", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}, '
     '{"role": "user", "content": "hi"}]'), 400),
    ("responses-instructions-system-media", RESPONSES, responses(', "instructions": "x"', '[{"role": "system", '
     '"content": [{"type": "input_image", "image_url": "http://x/y.png"}]}, {"role": "user", "content": "hi"}]'), 400),
    ("compact-system-media-joined", "/v1/responses/compact", b'{"input": [{"role": "system", "content": "a"}, '
     b'{"role": "system", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}, '
     b'{"role": "user", "content": "hi"}]}', 400),
    ("compact-max-output-tokens-zero", "/v1/responses/compact", b'{"input": "hi", "max_output_tokens": 0}', 400),
    # 10,000-element arrays
    ("10k-messages", CHAT, chat("", many('{"role": "user", "content": "hi"}')), 400),
    ("10k-stop", CHAT, chat(f', "stop": {many(chr(34) + "s" + chr(34))}'), 400),
    ("10k-logit-bias-pairs", CHAT, chat(f', "logit_bias": {many("[1, 1]")}'), 400),
    ("10k-logit-bias-object", CHAT,
     chat(', "logit_bias": {' + ",".join(f'"{i}": 1' for i in range(10_000)) + "}"), 400),
    ("10k-dry-breakers", CHAT,
     chat(f', "dry_multiplier": 0.8, "dry_sequence_breakers": {many(chr(34) + "a" + chr(34))}'), 400),
    ("10k-tools", CHAT, chat(f', "tools": {many(TOOLS[1:-1])}'), 400),
    ("10k-prompts", "/v1/completions",
     f'{{"prompt": {many(chr(34) + "hi" + chr(34))}, "max_tokens": 2}}'.encode(), 400),
    ("10k-prompt-tokens", "/completion", f'{{"prompt": {many("1")}, "n_predict": 2}}'.encode(), 400),
    ("10k-anthropic-messages", MESSAGES, anthropic("", many('{"role": "user", "content": "hi"}')), 400),
    ("10k-anthropic-stop-sequences", MESSAGES, anthropic(f', "stop_sequences": {many(chr(34) + "s" + chr(34))}'), 400),
    ("10k-responses-input", RESPONSES, responses("", many('{"role": "user", "content": "hi"}')), 400),
    # too large: over the character cap (1 Mi on this server) and over the byte cap (32 MiB)
    ("2m-characters", CHAT, chat("", '[{"role": "user", "content": "' + "a" * 2_000_000 + '"}]'), 413),
    ("2m-characters-anthropic", MESSAGES,
     anthropic("", '[{"role": "user", "content": "' + "a" * 2_000_000 + '"}]'), 413),
    ("33-mib-body", "/completion", b'{"prompt": "' + b"a" * (33 * 1024 * 1024) + b'"}', 413),
    # not a JSON object at all
    ("malformed-json", CHAT, b'{"messages": [', 400),
    ("malformed-json-anthropic", MESSAGES, b'{"messages": [', 400),
    ("malformed-trailing-comma", "/completion", b'{"prompt": "hi",}', 400),
    ("malformed-single-quotes", RESPONSES, b"{'input': 'hi'}", 400),
    ("empty-body", CHAT, b"", 400),
    ("empty-body-anthropic", MESSAGES, b"", 400),
    ("whitespace-body", "/completion", b"  \n", 400),
    ("array-body", CHAT, b'[{"messages": []}]', 400),
    ("array-body-anthropic", MESSAGES, b"[1, 2]", 400),
    ("string-body", RESPONSES, b'"hi"', 400),
    ("null-body", "/tokenize", b"null", 400),
    ("non-utf8-body", CHAT, b"\xff\xfe\xfd", 400),
    ("non-utf8-in-string", CHAT, b'{"messages": [{"role": "user", "content": "\xff"}], "max_tokens": 2}', 400),
    ("non-utf8-in-string-anthropic", MESSAGES,
     b'{"messages": [{"role": "user", "content": "\xc3"}], "max_tokens": 2}', 400),
    ("non-utf8-responses", RESPONSES, b'{"input": "\x80\x80", "max_output_tokens": 2}', 400),
    ("raw-control-character", "/tokenize", b'{"content": "a\x01b"}', 400),
]

# malformed tool_choice shapes on the Responses routes
RESPONSES_TOOL_CHOICE_CASES = [
    ("responses-tool-choice-function-string", RESPONSES,
     responses(', "tool_choice": {"type": "function", "function": "x"}'), 400),
    ("input-tokens-tool-choice-function-string", "/v1/responses/input_tokens",
     b'{"input": "hi", "tool_choice": {"type": "function", "function": "x"}}', 400),
    ("responses-allowed-tools-string", RESPONSES,
     responses(', "tool_choice": {"type": "allowed_tools", "tools": "abc"}'), 400),
    ("responses-allowed-tools-number", RESPONSES,
     responses(', "tool_choice": {"type": "allowed_tools", "tools": [5]}'), 400),
    ("responses-allowed-tool-name-list", RESPONSES,
     responses(', "tool_choice": {"type": "allowed_tools", "tools": [{"name": [1]}]}'), 400),
]

# NUL characters are valid JSON and valid Unicode: 200 or a 400, never a 5xx or a hang
NUL_CASES = [
    ("nul-chat-content", CHAT, chat("", '[{"role": "user", "content": "a\\u0000b"}]')),
    ("nul-chat-stop", CHAT, chat(', "stop": ["\\u0000"]')),
    ("nul-chat-role", CHAT, chat("", '[{"role": "user\\u0000", "content": "hi"}]')),
    ("nul-chat-name", CHAT, chat("", '[{"role": "user", "content": "hi", "name": "\\u0000"}]')),
    ("nul-chat-key", CHAT, chat(', "\\u0000": "\\u0000"')),
    ("nul-tool-name", CHAT,
     chat(', "tools": [{"type": "function", "function": {"name": "\\u0000"}}], "tool_choice": "required"')),
    ("nul-dry-breaker", CHAT, chat(', "dry_multiplier": 0.8, "dry_sequence_breakers": ["\\u0000"]')),
    ("nul-completion-prompt", "/completion", b'{"prompt": "\\u0000", "n_predict": 2}'),
    ("nul-v1-completion-prompt", "/v1/completions", b'{"prompt": ["a\\u0000", "\\u0000b"], "max_tokens": 2}'),
    ("nul-tokenize", "/tokenize", b'{"content": "\\u0000\\u0000", "with_pieces": true}'),
    ("nul-anthropic", MESSAGES,
     anthropic(', "system": "\\u0000", "stop_sequences": ["\\u0000"]', '[{"role": "user", "content": "\\u0000"}]')),
    ("nul-count-tokens", "/v1/messages/count_tokens", b'{"messages": [{"role": "user", "content": "\\u0000"}]}'),
    ("nul-responses", RESPONSES, responses(', "instructions": "\\u0000"', '"\\u0000"')),
    ("nul-responses-stream", RESPONSES,
     responses(', "stream": true', '[{"role": "user", "content": [{"type": "input_text", "text": "\\u0000"}]}]')),
    ("nul-chat-stream", CHAT, chat(', "stream": true', '[{"role": "user", "content": "\\u0000"}]')),
]


@pytest.fixture(scope="module")
def client(server):
    with server.client(timeout=REQUEST_TIMEOUT_S) as client:
        yield client


def _assert_error(path: str, status: int, content: bytes, expected: int) -> None:
    assert status == expected, f"{status} (expected {expected}): {content[:500]!r}"
    body = json.loads(content)
    assert error_shape_problem(path, body) is None, body
    if is_anthropic_path(path):
        assert body["error"]["type"] == ("request_too_large" if expected == 413 else "invalid_request_error")
    elif b'"n_ctx"' in content:  # a prompt past the slot context: llama-server's own error type
        assert body["error"]["type"] == "exceed_context_size_error"
    else:
        assert body["error"]["type"] == "invalid_request_error"


def _assert_healthy(client) -> None:
    assert client.get("/health").status_code == 200


def _params(cases, *marks) -> list:
    return [pytest.param(*case[1:], id=case[0], marks=marks) for case in cases]


@pytest.mark.parametrize("path, raw, status", _params(CASES) + _params(RESPONSES_TOOL_CHOICE_CASES))
def test_hostile_body_gets_its_4xx(client, path, raw, status):
    answer_status, _, content = send(client, path, raw)
    _assert_error(path, answer_status, content, status)
    _assert_healthy(client)


@pytest.mark.parametrize("path, raw", _params(NUL_CASES))
def test_nul_characters_are_served_or_refused(client, path, raw):
    status, headers, content = send(client, path, raw)
    assert status in (200, 400), f"{status}: {content[:500]!r}"
    if status == 400:
        _assert_error(path, status, content, 400)
    assert not problems(path, status, headers, content)  # streams: no error event, no failed response
    _assert_healthy(client)


def test_grammar_with_its_only_tokens_banned_is_no_server_error(client):
    """The schema's strings open with '"' (token 18), which logit_bias bans: no token
    is left to sample, so the request's own constraints cannot be met: a 400, not a
    failure of ours."""
    raw = (b'{"messages": [{"role": "user", "content": "0"}], "max_tokens": 4, "logit_bias": {"18": false}, '
           b'"response_format": ' + ENUM_FORMAT + b"}")
    status, headers, content = send(client, CHAT, raw)
    assert status < 500, content[:500]
    assert not problems(CHAT, status, headers, content)


def _reset_peak_rss(pid: int) -> None:
    """Peak RSS back to the current RSS (Linux's clear_refs 5), so what earlier tests
    made the server hold cannot hide a peak; where that is refused, the old peak stays."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        pass


def _peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc/<pid>/status")


def test_huge_penalty_windows_cost_no_memory(server, client):
    """Penalty windows far beyond the context are clamped to the slot's: before that,
    llama.cpp sized its history ring by the request (1 GB of peak RSS)."""
    _reset_peak_rss(server.process.pid)
    before = _peak_rss_kib(server.process.pid)
    for extra in (', "repeat_penalty": 1.1, "repeat_last_n": 268435456, "n_predict": 4',
                  ', "dry_multiplier": 0.8, "dry_penalty_last_n": 2147483647, "n_predict": 4'):
        status, _, content = send(client, "/completion", b'{"prompt": "Hello"' + extra.encode() + b"}")
        assert status == 200, content[:500]
        assert json.loads(content)["tokens_predicted"] >= 1
    grown_mib = (_peak_rss_kib(server.process.pid) - before) / 1024
    assert grown_mib < 100, f"peak RSS grew by {grown_mib:.0f} MiB"
    _assert_healthy(client)
