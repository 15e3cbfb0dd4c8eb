"""llama-server's grammar fields on the real server: `grammar` (GBNF) on /completion,
/v1/completions and chat, `json_schema` on each, chat's `response_format` forms, and
the 400s for what cannot compile, before any generation."""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import pytest

YES_NO = 'root ::= "yes" | "no"'
CODE = 'root ::= [0-9]{1,3} ("-" [0-9]{1,3}){2}'  # a repetition of a number rule
CODE_RE = r"[0-9]{1,3}(-[0-9]{1,3}){2}"
POINT = {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 99},
                                          "label": {"type": "string", "enum": ["a", "b"]}},
         "required": ["x", "label"], "additionalProperties": False}
ASK = [{"role": "user", "content": "Is the sky blue? Answer."}]


def _completion(http, **fields) -> dict:
    response = http.post("/completion", json={"prompt": "Q: Is the sky blue?\nA:", "n_predict": 24, **fields})
    assert response.status_code == 200, response.text
    return response.json()


def _v1_completion(http, **fields) -> str:
    response = http.post("/v1/completions", json={"prompt": "Q: Is the sky blue?\nA:", "max_tokens": 24, **fields})
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["text"]


def _chat(http, **fields) -> str:
    response = http.post("/v1/chat/completions", json={"messages": ASK, "max_tokens": 40, **fields})
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]


def _events(http, path: str, body: dict) -> list[dict]:
    with http.stream("POST", path, json={**body, "stream": True}) as response:
        assert response.status_code == 200
        return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_yes_no_grammar_forces_the_answer_on_every_route(http, seed):
    sampling = {"grammar": YES_NO, "temperature": 1.0, "seed": seed}
    native = _completion(http, **sampling)
    assert native["content"] in ("yes", "no")
    assert native["stop_type"] == "eos"  # the grammar left only EOS, as llama-server stops
    assert native["generation_settings"]["grammar"] == YES_NO
    assert _v1_completion(http, **sampling) in ("yes", "no")
    assert _chat(http, **sampling) in ("yes", "no")


def test_repetition_and_number_rules_shape_the_text(http):
    for seed in range(3):
        sampling = {"grammar": CODE, "temperature": 1.0, "seed": seed}
        assert re.fullmatch(CODE_RE, _completion(http, **sampling)["content"])
        assert re.fullmatch(CODE_RE, _v1_completion(http, **sampling))
        assert re.fullmatch(CODE_RE, _chat(http, **sampling))


def test_grammar_output_is_constrained_when_streamed(http):
    sampling = {"grammar": CODE, "temperature": 1.0, "seed": 7}
    native = _events(http, "/completion", {"prompt": "Code:", "n_predict": 24, **sampling})
    assert native[-1]["stop"] is True
    assert re.fullmatch(CODE_RE, "".join(e["content"] for e in native[:-1]))
    assert native[-1]["generation_settings"]["grammar"] == CODE
    v1 = _events(http, "/v1/completions", {"prompt": "Code:", "max_tokens": 24, **sampling})
    assert re.fullmatch(CODE_RE, "".join(c["choices"][0]["text"] for c in v1 if c["choices"]))
    chat = _events(http, "/v1/chat/completions", {"messages": ASK, "max_tokens": 40, **sampling})
    assert re.fullmatch(CODE_RE, "".join(c["choices"][0]["delta"].get("content") or ""
                                         for c in chat if c["choices"]))


def test_json_schema_on_completion_validates(http):
    for seed in (1, 2):
        body = _completion(http, json_schema=POINT, temperature=1.0, seed=seed, n_predict=60)
        jsonschema.validate(json.loads(body["content"]), POINT)
        assert body["stop_type"] == "eos"
    streamed = _events(http, "/completion", {"prompt": "A point:", "n_predict": 60, "json_schema": POINT,
                                             "temperature": 0})
    jsonschema.validate(json.loads("".join(e["content"] for e in streamed[:-1])), POINT)
    jsonschema.validate(json.loads(_v1_completion(http, json_schema=POINT, max_tokens=60, temperature=0)), POINT)


def test_empty_json_schema_is_any_object(http):
    body = _completion(http, json_schema={}, temperature=0, n_predict=60)
    assert body["content"].lstrip().startswith("{")
    if body["stop_type"] == "eos":
        assert isinstance(json.loads(body["content"]), dict)


@pytest.mark.parametrize("fields", [
    {"response_format": {"type": "json_object", "schema": POINT}},  # llama-server's own form
    {"response_format": {"type": "json_schema", "json_schema": {"name": "point", "schema": POINT}}},
    {"json_schema": POINT},  # llama-server's chat takes the bare field too
    {"json_schema": POINT, "response_format": {"type": "json_object"}},
])
def test_chat_schema_forms(http, fields):
    content = _chat(http, **fields, temperature=0, max_tokens=60)
    jsonschema.validate(json.loads(content), POINT)


def test_chat_json_schema_without_schema_is_any_object(http):
    content = _chat(http, response_format={"type": "json_schema"}, temperature=0, max_tokens=80)
    assert content.lstrip().startswith("{")


def _prompt_tokens_total(http) -> float:
    text = http.get("/metrics").text
    return float(re.search(r"^mlxcel_prompt_tokens_total (\S+)$", text, re.M).group(1))


def _error(response, words: str) -> str:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert words in error["message"], error["message"]
    return error["message"]


ROUTES = [("/completion", {"prompt": "Hi", "n_predict": 8}),
          ("/v1/completions", {"prompt": "Hi", "max_tokens": 8}),
          ("/v1/chat/completions", {"messages": ASK, "max_tokens": 8})]


@pytest.mark.parametrize("path, body", ROUTES)
def test_invalid_grammar_is_a_400_before_any_generation(http, path, body):
    before = _prompt_tokens_total(http)
    for grammar in ("root ::= this is (not valid GBNF", 'root ::= undefined_rule', 'rot ::= "x"'):
        started = time.monotonic()
        response = http.post(path, json={**body, "grammar": grammar})
        assert time.monotonic() - started < 5
        message = _error(response, "Failed to parse grammar")
        assert response.json()["error"]["code"] == "invalid_grammar"
        assert len(message) < 300
    streamed = http.post(path, json={**body, "grammar": "root ::= (", "stream": True})
    _error(streamed, "Failed to parse grammar")
    assert _prompt_tokens_total(http) == before  # nothing reached the engine
    assert http.post(path, json={**body, "grammar": YES_NO}).status_code == 200


@pytest.mark.parametrize("path, body", ROUTES)
def test_invalid_or_oversized_schema_and_grammar_are_400s(http, path, body):
    _error(http.post(path, json={**body, "json_schema": {"type": "strnig"}}), "invalid JSON schema")
    _error(http.post(path, json={**body, "json_schema": {"type": "integer", "minimum": 5, "maximum": 1}}),
           "invalid JSON schema")
    _error(http.post(path, json={**body, "json_schema": "{}"}), "json_schema")
    _error(http.post(path, json={**body, "grammar": 'root ::= "x"\n' + "# pad\n" * 12_000}), "larger than 64 KiB")
    _error(http.post(path, json={**body, "grammar": YES_NO, "json_schema": POINT}),
           "Cannot use both json_schema and grammar")
    assert http.post(path, json=body).status_code == 200


@pytest.mark.parametrize("path, body", ROUTES)
def test_a_lark_grammar_s_json_schema_gets_the_schema_limits(http, path, body):
    """A Lark `%json` schema is compiled with its grammar: an integer bound that rounds
    to -2^63 segfaulted the server there, past the checks a json_schema gets."""
    crashing = '%llguidance {}\nstart: "n=" x\nx: %json {"type": "integer", "minimum": -1e300, "maximum": -1e299}'
    _error(http.post(path, json={**body, "grammar": crashing}), "2^63")
    deep = "start: %json " + '{"anyOf": [' * 20 + "{}" + "]}" * 20
    _error(http.post(path, json={**body, "grammar": deep}), "32 levels")
    fine = http.post(path, json={**body, "grammar": 'start: %json {"type": "integer", "minimum": 0, "maximum": 9}'})
    assert fine.status_code == 200, fine.text


def test_long_chains_of_rules_leave_other_grammars_their_compile_time(server, http):
    """A 64 KiB GBNF chain defined top-down cost llguidance's converter ~4 s holding the
    GIL; three of them made a yes/no grammar sent beside them time out into a 400."""
    chain = "\n".join(["root ::= r0", *(f'r{i} ::= r{i + 1} "a"' for i in range(3_300)), 'r3300 ::= "z"'])

    def send(grammar):
        with server.client() as client:
            return client.post("/completion", json={"prompt": "Hi", "n_predict": 4, "grammar": grammar})

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(send, [chain, chain, chain, YES_NO]))
    assert [answer.status_code for answer in answers] == [200] * 4, answers[-1].text
    assert answers[-1].json()["content"] in ("yes", "no")


@pytest.mark.parametrize("grammar", ['root ::= "a"{100000}', "root ::= " + " | ".join(f'"w{i}"' for i in range(5000))])
def test_a_grammar_past_the_matchers_limits_says_so(http, grammar):
    """The first token compiles and masks fine; taking it in breaks the matcher's limits.
    A 400 that names the limits: it blamed a logit_bias the request does not have."""
    message = _error(http.post("/completion", json={"prompt": "Hi", "n_predict": 4, "grammar": grammar}),
                     "structured-output limits")
    assert "logit_bias" not in message
    banned = http.post("/completion", json={"prompt": "Hi", "n_predict": 4, "grammar": 'root ::= "Z"',
                                            "logit_bias": [["Z", False]]})  # the one token the format allows
    assert banned.status_code == 400 and "logit_bias" in banned.json()["error"]["message"]


def test_a_format_that_needs_the_end_ignore_eos_bans_names_ignore_eos(http):
    """After "a" this grammar allows only the end-of-turn token, which ignore_eos bans: the
    400 blamed a logit_bias the request does not have."""
    grammar = 'start: "a" <|im_end|> "b"'
    message = _error(http.post("/completion", json={"prompt": "Hi", "n_predict": 4, "grammar": grammar,
                                                    "ignore_eos": True}), "no token satisfies")
    assert message.endswith("the request's ignore_eos")
    both = http.post("/completion", json={"prompt": "Hi", "n_predict": 4, "grammar": grammar, "ignore_eos": True,
                                          "logit_bias": [["b", False]]})
    assert both.json()["error"]["message"].endswith("the request's logit_bias and ignore_eos")


@pytest.mark.parametrize("response_format", [
    {"type": "json_object", "schema": 123},
    {"type": "json_object", "schema": {"type": "hiccup"}},
    {"type": "sound"},
])
def test_chat_bad_response_formats_are_400s(http, response_format):
    response = http.post("/v1/chat/completions", json={"messages": ASK, "max_tokens": 4,
                                                       "response_format": response_format})
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"


def test_chat_grammar_conflicts(http):
    _error(http.post("/v1/chat/completions", json={
        "messages": ASK, "max_tokens": 4, "grammar": YES_NO, "response_format": {"type": "json_object"}}),
        "Cannot use both json_schema and grammar")
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    _error(http.post("/v1/chat/completions", json={"messages": ASK, "max_tokens": 4, "grammar": YES_NO,
                                                   "tools": tools}),
           "Cannot use custom grammar constraints with tools.")
    ok = http.post("/v1/chat/completions", json={"messages": ASK, "max_tokens": 4, "grammar": YES_NO,
                                                 "tools": tools, "tool_choice": "none"})
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] in ("yes", "no")


def test_empty_grammar_is_no_grammar(http):
    assert _completion(http, grammar="", n_predict=4, temperature=0)["generation_settings"]["grammar"] == ""
