"""The same request sent to mlxcel and to the reference llama-server (same llama.cpp,
same model, same flags), compared field by field.

Both run SmolLM2-135M with `-c 4096 -np 4 --metrics -t 2`. Greedy generations run the
same llama.cpp on the same tokens, so their text must match too. Skipped, with the
reason shown, when the reference has not been built (`make reference`)."""

from __future__ import annotations

import json
import re
import socket

import pytest

from tests.reference_server import BUILD_HINT, ReferenceServer, reference_binary, same_attention

PROMPT = "The capital of France is"
GREEDY = {"temperature": 0, "n_predict": 12}
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a fruit."}]


@pytest.fixture(scope="module")
def reference(server):
    binary = reference_binary()
    if binary is None:
        pytest.skip(f"the reference llama-server is not built: {BUILD_HINT}")
    proc = ReferenceServer(binary, "SmolLM2-135M-Instruct.Q4_1.gguf", "-c", "4096", "-np", "4", "--metrics",
                           *same_attention(server))
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


@pytest.fixture
def both(server, reference):
    with server.client() as ours, reference.client() as theirs:
        yield ours, theirs


def post_both(both, path: str, body: dict):
    ours, theirs = both
    return ours.post(path, json=body), theirs.post(path, json=body)


def missing_keys(ours: dict, theirs: dict) -> set[str]:
    return set(theirs) - set(ours)


def sse_events(client, path: str, body: dict) -> list[dict]:
    with client.stream("POST", path, json=body) as response:
        assert response.status_code == 200, response.read()
        return [json.loads(line[6:]) for line in response.iter_lines()
                if line.startswith("data: ") and line != "data: [DONE]"]


def error_shape(response) -> tuple[int, str | None]:
    error = response.json().get("error", {})
    return response.status_code, error.get("type")


# --- /completion ---------------------------------------------------------------------

def test_completion_fields_and_greedy_text(both):
    ours, theirs = post_both(both, "/completion", {"prompt": PROMPT, **GREEDY})
    assert ours.status_code == theirs.status_code == 200
    a, b = ours.json(), theirs.json()
    assert missing_keys(a, b) == set()
    assert missing_keys(a["generation_settings"], b["generation_settings"]) == set()
    assert missing_keys(a["timings"], b["timings"]) == set()
    assert a["content"] == b["content"]
    for field in ("tokens_predicted", "tokens_evaluated", "stop_type", "stop", "truncated"):
        assert a[field] == b[field], field


def test_completion_stream_chunks(both):
    body = {"prompt": PROMPT, **GREEDY, "stream": True}
    ours, theirs = (sse_events(client, "/completion", body) for client in both)
    assert missing_keys(ours[0], theirs[0]) == set()
    assert missing_keys(ours[-1], theirs[-1]) == set()
    assert "".join(e["content"] for e in ours) == "".join(e["content"] for e in theirs)


@pytest.mark.parametrize("prompt", [
    [1, 504, 3458, 282],                                   # token ids
    ["The capital", " of France is"],                      # several prompts
    [[1, 504, 3458], "The capital of Spain is"],           # several prompts, mixed kinds
    {"prompt_string": PROMPT},                             # llama-server's object prompt
])
def test_prompt_forms(both, prompt):
    ours, theirs = post_both(both, "/completion", {"prompt": prompt, **GREEDY})
    assert ours.status_code == theirs.status_code == 200, (ours.text, theirs.text)
    a, b = ours.json(), theirs.json()
    assert type(a) is type(b)
    a, b = (a, b) if isinstance(a, list) else ([a], [b])
    assert [x["content"] for x in a] == [y["content"] for y in b]
    assert [x["tokens_evaluated"] for x in a] == [y["tokens_evaluated"] for y in b]


def test_completions_route_is_native(both):
    ours, theirs = post_both(both, "/completions", {"prompt": PROMPT, **GREEDY})
    assert missing_keys(ours.json(), theirs.json()) == set()
    assert ours.json()["content"] == theirs.json()["content"]


@pytest.mark.parametrize("post_sampling", [False, True])
def test_n_probs(both, post_sampling):
    body = {"prompt": PROMPT, **GREEDY, "n_probs": 3, "post_sampling_probs": post_sampling}
    ours, theirs = post_both(both, "/completion", body)
    a, b = ours.json()["completion_probabilities"], theirs.json()["completion_probabilities"]
    assert len(a) == len(b)
    assert missing_keys(a[0], b[0]) == set() and missing_keys(b[0], a[0]) == set()
    top = "top_probs" if post_sampling else "top_logprobs"
    value = "prob" if post_sampling else "logprob"
    assert missing_keys(a[0][top][0], b[0][top][0]) == set()
    for x, y in zip(a, b):
        assert x["id"] == y["id"] and x["token"] == y["token"] and x["bytes"] == y["bytes"]
        assert x[value] == pytest.approx(y[value], abs=0.02)
        if not post_sampling:  # greedy keeps one candidate after sampling: its list is shorter
            assert [t["id"] for t in x[top]] == [t["id"] for t in y[top]]


@pytest.mark.parametrize("logit_bias", [
    {"504": -100},
    [[504, False]],
    [["Paris", -100]],
    [[" Paris", False]],
])
def test_logit_bias_forms(both, logit_bias):
    ours, theirs = post_both(both, "/completion", {"prompt": PROMPT, **GREEDY, "logit_bias": logit_bias})
    assert ours.status_code == theirs.status_code == 200
    assert ours.json()["content"] == theirs.json()["content"]
    assert ours.json()["generation_settings"]["logit_bias"] == theirs.json()["generation_settings"]["logit_bias"]


def test_ignore_eos_is_reported_as_a_ban(both):
    ours, theirs = post_both(both, "/completion", {"prompt": PROMPT, **GREEDY, "ignore_eos": True})
    assert ours.json()["generation_settings"]["logit_bias"] == theirs.json()["generation_settings"]["logit_bias"]
    assert ours.json()["generation_settings"]["ignore_eos"] is True


# --- grammars ----------------------------------------------------------------------

def test_grammar_output_matches(both):
    ours, theirs = post_both(both, "/completion", {"prompt": "Is the sky blue?", **GREEDY,
                                                   "grammar": 'root ::= ("yes" | "no")'})
    assert ours.status_code == theirs.status_code == 200
    assert ours.json()["content"] == theirs.json()["content"]
    assert ours.json()["generation_settings"]["grammar"] == theirs.json()["generation_settings"]["grammar"]


def test_grammar_with_literals_holds_on_both(both):
    """llguidance lets a literal the grammar forces come as the model's own tokens
    (" because"); llama.cpp's grammar sampler may spell it out piecewise (" ", "b",
    "ec", ...), so the texts can part there: both must match the grammar."""
    grammar = 'root ::= ("yes" | "no") " because " [a-z ]+ "."'
    ours, theirs = post_both(both, "/completion", {"prompt": "Is the sky blue?", **GREEDY, "n_predict": 24,
                                                   "grammar": grammar})
    for answer in (ours, theirs):
        assert answer.status_code == 200
        assert re.fullmatch(r"(yes|no) because [a-z ]+\.", answer.json()["content"]), answer.json()["content"]


def test_json_schema_output_is_valid_on_both(both):
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    ours, theirs = post_both(both, "/completion", {"prompt": "A person as JSON:", **GREEDY, "n_predict": 96,
                                                   "json_schema": schema})
    assert ours.status_code == theirs.status_code == 200
    for answer in (ours, theirs):
        assert isinstance(json.loads(answer.json()["content"])["name"], str)


@pytest.mark.parametrize("field,value", [("grammar", 'root ::= undefined_rule'), ("grammar", 'root ::= "a'),
                                         ("json_schema", {"type": "no-such-type"})])
def test_invalid_constraint_errors(both, field, value):
    ours, theirs = post_both(both, "/completion", {"prompt": PROMPT, **GREEDY, field: value})
    assert ours.status_code == 400 and theirs.status_code == 400
    assert error_shape(ours) == error_shape(theirs)


# --- context -----------------------------------------------------------------------

@pytest.mark.parametrize("path,stream", [("/completion", False), ("/completion", True),
                                         ("/v1/chat/completions", False), ("/v1/chat/completions", True)])
def test_prompt_over_the_context(both, path, stream):
    long_text = "hello " * 1100  # 1,024 tokens per slot on both
    body = ({"prompt": long_text} if path == "/completion"
            else {"messages": [{"role": "user", "content": long_text}]}) | {"stream": stream, "n_predict": 4}
    ours, theirs = post_both(both, path, body)
    assert ours.status_code == theirs.status_code == 400
    a, b = ours.json()["error"], theirs.json()["error"]
    assert a["type"] == b["type"] == "exceed_context_size_error"
    assert (a["n_prompt_tokens"], a["n_ctx"]) == (b["n_prompt_tokens"], b["n_ctx"])


# --- /infill, /apply-template, /tokenize ----------------------------------------------

def test_infill_without_fim_tokens(both):
    ours, theirs = post_both(both, "/infill", {"input_prefix": "def f():\n    return ", "input_suffix": "\n"})
    assert error_shape(ours) == error_shape(theirs)


def test_apply_template_renders_the_same_prompt(both):
    ours, theirs = post_both(both, "/apply-template", {"messages": MESSAGES})
    assert ours.status_code == theirs.status_code == 200
    assert ours.json() == theirs.json()


def test_assistant_prefill_continues_the_same_way(both):
    messages = [*MESSAGES, {"role": "assistant", "content": "My favourite fruit is"}]
    ours, theirs = post_both(both, "/v1/chat/completions", {"messages": messages, "temperature": 0,
                                                            "max_tokens": 8})
    assert ours.status_code == theirs.status_code == 200
    assert ours.json()["choices"][0]["message"]["content"] == theirs.json()["choices"][0]["message"]["content"]


def test_contradicting_prefill_flags(both):
    body = {"messages": MESSAGES, "add_generation_prompt": True, "continue_final_message": True}
    ours, theirs = post_both(both, "/v1/chat/completions", body)
    assert ours.status_code == theirs.status_code == 400
    assert error_shape(ours) == error_shape(theirs)


@pytest.mark.parametrize("body", [{"content": "Hello, wörld <|im_end|>", "with_pieces": True},
                                  {"content": "Hello", "add_special": True}])
def test_tokenize_matches(both, body):
    ours, theirs = post_both(both, "/tokenize", body)
    assert ours.json() == theirs.json()


def test_detokenize_matches(both):
    ours, theirs = post_both(both, "/detokenize", {"tokens": [1, 504, 3458, 282, 4649, 314]})
    assert ours.json() == theirs.json()


# --- server surface ------------------------------------------------------------------

def test_props_carry_llama_server_fields(both):
    ours, theirs = (client.get("/props").json() for client in both)
    assert missing_keys(ours, theirs) == set()
    assert missing_keys(ours["default_generation_settings"], theirs["default_generation_settings"]) == set()
    assert ours["total_slots"] == theirs["total_slots"]


def test_models_entry_fields(both):
    ours, theirs = (client.get("/v1/models").json() for client in both)
    assert missing_keys(ours, theirs) == set()
    assert missing_keys(ours["data"][0], theirs["data"][0]) == set()


def test_metrics_families(both):
    ours, theirs = both
    ours.post("/completion", json={"prompt": PROMPT, **GREEDY})
    theirs.post("/completion", json={"prompt": PROMPT, **GREEDY})

    def families(client) -> set[str]:
        response = client.get("/metrics")
        assert response.status_code == 200
        return {line.split()[2] for line in response.text.splitlines()
                if line.startswith("# TYPE llamacpp:")}

    assert families(theirs) <= families(ours)
    assert "Process-Start-Time-Unix".lower() in {k.lower() for k in ours.get("/metrics").headers}


def raw_preflight(base_url: str) -> list[str]:
    host, port = base_url.removeprefix("http://").split(":")
    request = (f"OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nOrigin: http://example.test\r\n"
               "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: content-type\r\n"
               "Connection: close\r\n\r\n")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request.encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head = data.split(b"\r\n\r\n")[0].decode()
    return sorted(line for line in head.split("\r\n")[1:] if line.startswith("Access-Control-"))


def test_cors_preflight_headers_byte_for_byte(server, reference):
    assert raw_preflight(server.base_url) == raw_preflight(reference.base_url)


# --- a keyed pair, without --metrics ----------------------------------------------------

@pytest.fixture(scope="module")
def keyed_pair(reference):
    from tests.server_process import ServerProcess

    ours = ServerProcess("-c", "1024", "-np", "1", "--api-key", "sekrit")
    theirs = ReferenceServer(reference_binary(), "SmolLM2-135M-Instruct.Q4_1.gguf", "-c", "1024", "-np", "1",
                             "--api-key", "sekrit")
    try:
        ours.wait_ready()
        theirs.wait_ready()
        yield ours, theirs
    finally:
        ours.stop()
        theirs.stop()


@pytest.mark.parametrize("headers, kind", [({}, "missing_api_key"),
                                           ({"Authorization": "Bearer wrong"}, "invalid_api_key")])
@pytest.mark.parametrize("path", ["/completion", "/v1/chat/completions", "/tokenize"])
def test_auth_errors_match(keyed_pair, headers, kind, path):
    """The same 401 where llama-server answers one; the body names the spec's error type
    (missing_api_key / invalid_api_key) where llama-server says authentication_error,
    with llama-server's message for a wrong key."""
    ours, theirs = keyed_pair
    with ours.client() as a, theirs.client() as b:
        answers = [client.post(path, json={"prompt": PROMPT, "content": "x"}, headers=headers) for client in (a, b)]
    assert answers[0].status_code == answers[1].status_code == 401
    mine, reference = answers[0].json()["error"], answers[1].json()["error"]
    assert (mine["type"], mine["code"]) == (kind, kind) and reference["type"] == "authentication_error"
    if kind == "invalid_api_key":
        assert mine["message"] == reference["message"]


def test_public_routes_match(keyed_pair):
    ours, theirs = keyed_pair
    with ours.client() as a, theirs.client() as b:
        for path in ("/health", "/v1/health"):
            assert a.get(path).status_code == b.get(path).status_code == 200, path


def test_metrics_off_answers_501(keyed_pair):
    ours, theirs = keyed_pair
    auth = {"Authorization": "Bearer sekrit"}
    with ours.client() as a, theirs.client() as b:
        answers = [client.get("/metrics", headers=auth) for client in (a, b)]
    assert answers[0].status_code == answers[1].status_code == 501
    assert answers[0].json() == answers[1].json()


REPETITIVE = "one two three four five, one two three four five, one two three four five, one two three"


@pytest.mark.parametrize("sampling", [
    {"temperature": 0.8, "seed": 42},
    {"temperature": 1.0, "seed": 7, "mirostat": 2},
    {"temperature": 1.0, "seed": 8, "mirostat": 1, "mirostat_tau": 4.0},
    {"temperature": 0.9, "seed": 5, "dynatemp_range": 0.4, "dynatemp_exponent": 1.5},
    {"temperature": 1.2, "seed": 9, "samplers": ["top_k", "temperature"], "top_k": 5},
    {"temperature": 1.0, "seed": 3, "samplers": "kt", "top_k": 3},
    {"temperature": 0.7, "seed": 4, "top_p": 0.8, "min_p": 0.0, "typical_p": 0.9, "min_keep": 2},
    # the penalties and DRY read the prompt too: llama-server accepts it into the chain first
    {"temperature": 0.8, "seed": 11, "repeat_penalty": 1.6, "repeat_last_n": 64, "presence_penalty": 0.6,
     "prompt": REPETITIVE},
    {"temperature": 0.0, "repeat_penalty": 2.0, "frequency_penalty": 0.5, "prompt": REPETITIVE},
    {"temperature": 0.8, "seed": 12, "dry_multiplier": 2.0, "dry_allowed_length": 2, "prompt": REPETITIVE},
    {"temperature": 0.0, "dry_multiplier": 2.0, "dry_allowed_length": 1, "dry_penalty_last_n": 32,
     "prompt": REPETITIVE},
])
def test_seeded_sampling_matches_token_for_token(both, sampling):
    body = {"prompt": "Once upon a time", "n_predict": 24, **sampling}
    ours, theirs = post_both(both, "/completion", body)
    assert ours.status_code == theirs.status_code == 200
    assert ours.json()["content"] == theirs.json()["content"]
    for field in ("mirostat", "dynatemp_range", "samplers"):
        assert ours.json()["generation_settings"][field] == theirs.json()["generation_settings"][field], field
