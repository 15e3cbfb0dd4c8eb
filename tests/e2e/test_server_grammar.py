"""A server-wide grammar (llama-server's --grammar / --grammar-file / -j / -jf): every
generation follows it unless the request names its own grammar fields; a broken one
fails the start in one line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.server_process import ServerProcess

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["n"],
          "additionalProperties": False}


@pytest.fixture(scope="module")
def constrained(tmp_path_factory):
    schema_file = tmp_path_factory.mktemp("grammar") / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA))
    # the last of the flags wins, as in llama-server: the schema file, not the GBNF before it
    proc = ServerProcess("-c", "1024", "-np", "2", "--grammar", 'root ::= "never"', "-jf", str(schema_file))
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def _completion(client, **extra) -> str:
    answer = client.post("/completion", json={"prompt": "Once upon a time", "n_predict": 64, "temperature": 0,
                                              **extra})
    assert answer.status_code == 200, answer.text
    return answer.json()["content"]


def test_requests_without_grammar_fields_follow_the_server_s(constrained):
    with constrained.client() as client:
        native = _completion(client)
        openai = client.post("/v1/completions", json={"prompt": "Once upon a time", "max_tokens": 64,
                                                      "temperature": 0}).json()["choices"][0]["text"]
        chat = client.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 64, "temperature": 0,
        }).json()["choices"][0]["message"]["content"]
    for text in (native, openai, chat):
        assert set(json.loads(text)) == {"n"} and isinstance(json.loads(text)["n"], int)


def test_a_request_s_own_fields_replace_the_server_s(constrained):
    with constrained.client() as client:
        own = _completion(client, grammar='root ::= "yes" | "no"')
        emptied = _completion(client, grammar="")  # given, even empty: no grammar, as llama-server
        schema = _completion(client, json_schema={"type": "object", "properties": {"m": {"type": "boolean"}},
                                                  "required": ["m"], "additionalProperties": False})
        text = client.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 64, "temperature": 0,
            "response_format": {"type": "text"}}).json()["choices"][0]["message"]["content"]
    assert own in ("yes", "no")
    assert not emptied.lstrip().startswith("{") and not text.lstrip().startswith("{")
    assert set(json.loads(schema)) == {"m"}


@pytest.mark.parametrize("flags, message", [
    (["-j", "{not json"], "--json-schema: not JSON"),
    (["-jf", "/nonexistent/schema.json"], "cannot read /nonexistent/schema.json"),
    (["--grammar-file", "/nonexistent/g.gbnf"], "cannot read /nonexistent/g.gbnf"),
    (["-j", json.dumps({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}})],
     "the server's default grammar"),
    (["--grammar", "root ::= ("], "the server's default grammar"),
])
def test_a_broken_server_grammar_fails_the_start_in_one_line(flags, message):
    done = subprocess.run([sys.executable, "-m", "mlxcel", "serve", "-c", "512", "-np", "1", "--port", "0", *flags],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith(("mlxcel: error:", "mlxcel serve: error:"))]
    assert len(errors) == 1 and message in errors[0], done.stderr[-2000:]
