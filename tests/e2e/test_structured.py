"""response_format: JSON-schema constrained decoding on the real server."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

ANIMAL = {
    "type": "object",
    "properties": {
        "animal": {"type": "string", "maxLength": 20},
        "habitat": {"type": "string", "enum": ["forest", "desert", "ocean", "urban", "unknown"]},
        "legs": {"type": "integer", "minimum": 0, "maximum": 10},
    },
    "required": ["animal", "habitat", "legs"],
    "additionalProperties": False,
}
ASK = [{"role": "user", "content": "Name one animal, its habitat and its number of legs, as JSON."}]


def _json_schema(schema, name="result"):
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}


class Animal(BaseModel):
    animal: str
    habitat: Literal["forest", "desert", "ocean", "urban", "unknown"]
    legs: int


@pytest.mark.parametrize("which", ["openai_client", "qwen_client"])
def test_sdk_parse_returns_a_parsed_object(request, which):
    client = request.getfixturevalue(which)
    completion = client.chat.completions.parse(model="m", messages=ASK, response_format=Animal, temperature=0,
                                               max_tokens=120)
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, Animal)
    assert completion.choices[0].finish_reason == "stop"


def test_chat_json_schema_validates_streamed_and_not(http):
    body = {"messages": ASK, "response_format": _json_schema(ANIMAL), "temperature": 0.8, "seed": 5,
            "max_tokens": 120}
    whole = http.post("/v1/chat/completions", json=body).json()
    content = whole["choices"][0]["message"]["content"]
    jsonschema.validate(json.loads(content), ANIMAL)
    assert whole["choices"][0]["finish_reason"] == "stop"
    with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as response:
        chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    jsonschema.validate(json.loads(streamed), ANIMAL)


def test_completions_json_schema(http):
    body = http.post("/v1/completions", json={"prompt": "A JSON animal record:", "max_tokens": 120, "temperature": 0,
                                              "response_format": _json_schema(ANIMAL)}).json()
    jsonschema.validate(json.loads(body["choices"][0]["text"]), ANIMAL)


def test_json_object_is_any_object(http):
    body = http.post("/v1/chat/completions", json={"messages": ASK, "response_format": {"type": "json_object"},
                                                   "temperature": 0, "max_tokens": 150}).json()
    if body["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(body["choices"][0]["message"]["content"]), dict)
    else:
        assert body["choices"][0]["message"]["content"].lstrip().startswith("{")


def test_max_tokens_cut_is_length(http):
    body = http.post("/v1/chat/completions", json={"messages": ASK, "response_format": _json_schema(ANIMAL),
                                                   "temperature": 0, "max_tokens": 3}).json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 3


def _error(response) -> str:
    assert response.status_code == 400, response.text
    assert response.json()["error"]["type"] == "invalid_request_error"
    return response.json()["error"]["message"]


def _nested(depth):
    schema = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"deeper_secret_key": schema}}
    return schema


@pytest.mark.parametrize("schema, needle", [
    ({"type": "object", "properties": {f"secret_key_{i}": {"type": "string", "description": "x" * 100}
                                       for i in range(700)}}, "64"),
    (_nested(40), "32 levels"),
    ({"type": "object", "$defs": {"a": {"type": "string"}},
      "properties": {f"secret_key_{i}": {"$ref": "#/$defs/a"} for i in range(70)}}, "$ref"),
])
def test_schema_limits_are_400s_that_never_echo_the_schema(http, schema, needle):
    message = _error(http.post("/v1/chat/completions", json={"messages": ASK, "response_format": _json_schema(schema)}))
    assert needle in message
    assert "secret_key" not in message


def test_schema_the_engine_rejects_is_a_400_with_a_reason(http):
    bad = {"type": "object", "properties": {"a": {"type": "strnig"}}}
    assert _error(http.post("/v1/chat/completions", json={"messages": ASK, "response_format": _json_schema(bad)}))
    impossible = {"type": "integer", "minimum": 5, "maximum": 1}
    assert _error(http.post("/v1/chat/completions",
                            json={"messages": ASK, "response_format": _json_schema(impossible)}))


@pytest.mark.parametrize("schema", [
    {"type": "secret_type"},
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "secret_pattern("}}},
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/secret_def"}}},
    {"type": "object", "required": ["secret_key"], "additionalProperties": False},
])
def test_a_schema_the_engine_rejects_is_not_echoed(http, schema):
    """The engine's reason quotes the type, pattern, $ref or property it refuses; the
    spec says the schema is never echoed, on the chat route as on the native one."""
    chat = _error(http.post("/v1/chat/completions", json={"messages": ASK, "response_format": _json_schema(schema)}))
    native = _error(http.post("/completion", json={"prompt": "x", "n_predict": 4, "json_schema": schema}))
    assert chat.startswith("invalid JSON schema: ") and chat == native
    assert "secret" not in chat


def test_a_grammar_that_outgrows_the_matcher_mid_answer_is_a_400_and_the_server_goes_on(http):
    """A pattern whose lexer grows with every token compiles (its first mask is cheap)
    and breaks the matcher's limits a few tokens in: the request's own format, a 400
    for an answer, the end a stream gives any failure, never a server error."""
    schema = {"type": "string", "pattern": "(a*)*" * 500}  # unanchored: every prefix keeps each group open
    body = {"messages": [{"role": "user", "content": "say aaa"}], "temperature": 0, "max_tokens": 20,
            "response_format": _json_schema(schema)}
    message = _error(http.post("/v1/chat/completions", json=body))
    assert "structured-output limits" in message and "<non-verbose/>" not in message
    with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as response:
        assert response.status_code == 200
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    assert events[-1]["choices"][0]["finish_reason"] == "error"  # the spec's streamed failure
    native = {"prompt": "aaa", "temperature": 0, "n_predict": 20, "json_schema": schema}
    assert "structured-output limits" in _error(http.post("/completion", json=native))
    with http.stream("POST", "/completion", json={**native, "stream": True}) as response:
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    assert events[-1]["error"]["type"] == "invalid_request_error"
    fine = http.post("/v1/chat/completions", json={"messages": ASK, "response_format": _json_schema(ANIMAL),
                                                    "temperature": 0, "max_tokens": 120})
    jsonschema.validate(json.loads(fine.json()["choices"][0]["message"]["content"]), ANIMAL)


@pytest.mark.parametrize("response_format", [{"type": "xml"}, {"type": "json_object", "schema": 123},
                                             {"type": "json_schema", "json_schema": {"schema": "{}"}}])
def test_malformed_response_formats(http, response_format):
    _error(http.post("/v1/chat/completions", json={"messages": ASK, "response_format": response_format}))


def test_constrained_and_unconstrained_requests_share_steps(server, http):
    free = {"messages": [{"role": "user", "content": "Tell me a story."}], "temperature": 0, "max_tokens": 40,
            "cache_prompt": False, "ignore_eos": True}
    constrained = {"messages": ASK, "response_format": _json_schema(ANIMAL), "temperature": 0, "max_tokens": 120,
                   "cache_prompt": False}
    alone_free = http.post("/v1/chat/completions", json=free).json()["choices"][0]["message"]["content"]
    alone_json = http.post("/v1/chat/completions", json=constrained).json()["choices"][0]["message"]["content"]

    def send(body):
        with server.client() as client:
            return client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(send, [free, constrained, free, constrained]))
    assert results[0] == results[2] == alone_free
    for text in (results[1], results[3]):
        jsonschema.validate(json.loads(text), ANIMAL)
    assert results[1] == alone_json


simple_types = st.sampled_from([
    {"type": "string", "maxLength": 12},
    {"type": "integer", "minimum": -50, "maximum": 50},
    {"type": "boolean"},
    {"type": "string", "enum": ["red", "green", "blue"]},
    {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "maxItems": 3},
])


@st.composite
def object_schemas(draw):
    names = draw(st.lists(st.sampled_from(["name", "age", "ok", "color", "tags", "code"]), min_size=1, max_size=4,
                          unique=True))
    properties = {n: draw(simple_types) for n in names}
    required = draw(st.lists(st.sampled_from(names), unique=True))
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(schema=object_schemas(), seed=st.integers(0, 1000))
def test_every_finished_output_validates(server, schema, seed):
    with server.client() as client:
        body = client.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "Fill in the record."}],
            "response_format": _json_schema(schema), "temperature": 1.0, "seed": seed, "max_tokens": 120,
        }).json()
    choice = body["choices"][0]
    if choice["finish_reason"] == "stop":
        jsonschema.validate(json.loads(choice["message"]["content"]), schema)
    else:
        assert choice["finish_reason"] == "length"


def test_a_number_past_64_bit_integers_is_a_400_and_never_kills_the_server(http):
    """llguidance holds integer bounds in 64 bits: one that rounds to -2^63 or below
    segfaulted the server as it compiled, from a response format or a tool's schema."""
    schema = {"type": "object", "properties": {"secret_n": {"type": "integer", "minimum": -1e300, "maximum": -1e299}}}
    chat = _error(http.post("/v1/chat/completions", json={"messages": ASK, "response_format": _json_schema(schema)}))
    native = _error(http.post("/completion", json={"prompt": "x", "n_predict": 4, "json_schema": schema}))
    assert "2^63" in chat and chat == native and "secret" not in chat
    tool = {"type": "function", "function": {"name": "pick", "parameters": schema}}
    answer = http.post("/v1/chat/completions", json={"messages": ASK, "tools": [tool], "max_tokens": 4})
    assert answer.status_code == 200, answer.text
    assert http.get("/health").status_code == 200


def test_many_pattern_properties_are_a_400_that_leaves_the_compilers_free(http):
    """llguidance checks patternProperties pairwise: 400 of them held a compile worker
    for minutes, so two such requests made every schema after them time out (a 400
    blaming its own schema)."""
    patterns = {f"^secret_{i}_[a-z]+$": {"type": "integer"} for i in range(400)}
    hostile = {"messages": ASK, "max_tokens": 2, "response_format": _json_schema({"type": "object",
                                                                                 "patternProperties": patterns})}
    for _ in range(2):
        message = _error(http.post("/v1/chat/completions", json=hostile))
        assert "64 patternProperties" in message and "secret" not in message
    fine = http.post("/v1/chat/completions", json={"messages": ASK, "max_tokens": 2,
                                                    "response_format": _json_schema({"type": "integer"})})
    assert fine.status_code == 200, fine.text
