"""llama-server's native completion API in full: every prompt shape, /completions as
the native route, n_probs and post-sampling probabilities, every logit_bias form,
and generation_settings as llama-server reports them."""

from __future__ import annotations

import json
import math

import pytest

PROMPT = "The capital of France is"
NO_MULTIMODAL = "Multimodal data provided, but model does not support multimodal requests."
GREEDY = {"temperature": 0, "n_predict": 6}


def _tokens(http, text: str, add_special: bool = True) -> list[int]:
    return http.post("/tokenize", json={"content": text, "add_special": add_special}).json()["tokens"]


def _complete(http, path: str = "/completion", **body):
    response = http.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def _stream(http, **body) -> list[dict]:
    with http.stream("POST", "/completion", json={**body, "stream": True}) as response:
        assert response.status_code == 200
        return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]


# -- prompts ---------------------------------------------------------------------------


def test_token_array_and_mixed_prompts_read_as_the_string(http):
    whole = _complete(http, prompt=PROMPT, **GREEDY)
    ids = _tokens(http, PROMPT)
    as_tokens = _complete(http, prompt=ids, **GREEDY)
    assert as_tokens["content"] == whole["content"]
    assert as_tokens["tokens_evaluated"] == whole["tokens_evaluated"] == len(ids)
    head, tail = "The capital", " of France is"
    mixed = _complete(http, prompt=[head, *_tokens(http, tail, add_special=False)], **GREEDY)
    assert mixed["tokens_evaluated"] == len(_tokens(http, head)) + len(_tokens(http, tail, add_special=False))
    assert "Paris" in mixed["content"]


def test_a_list_of_prompts_answers_each_in_order(http):
    prompts = ["One", "One two three", "One two"]
    lengths = [len(_tokens(http, p)) for p in prompts]
    assert len(set(lengths)) == 3
    bodies = _complete(http, prompt=prompts, temperature=0, n_predict=3)
    assert [b["index"] for b in bodies] == [0, 1, 2]
    assert [b["tokens_evaluated"] for b in bodies] == lengths
    assert [b["prompt"] for b in bodies] == prompts
    events = _stream(http, prompt=prompts, temperature=0, n_predict=3)
    finals = {e["index"]: e for e in events if e["stop"]}
    assert [finals[i]["tokens_evaluated"] for i in range(3)] == lengths
    for i in range(3):
        streamed = "".join(e["content"] for e in events if e["index"] == i)
        assert streamed == bodies[i]["content"]


def test_token_array_lists_are_several_prompts(http):
    first, second = _tokens(http, "Hello"), _tokens(http, PROMPT)
    bodies = _complete(http, prompt=[first, second], **GREEDY)
    assert [b["tokens_evaluated"] for b in bodies] == [len(first), len(second)]


def test_object_prompts_are_read_for_their_string(http):
    whole = _complete(http, prompt=PROMPT, **GREEDY)
    alone = _complete(http, prompt={"prompt_string": PROMPT}, **GREEDY)
    assert alone["content"] == whole["content"] and alone["tokens_evaluated"] == whole["tokens_evaluated"]
    listed = _complete(http, prompt=[{"prompt_string": PROMPT}, "Hello"], **GREEDY)
    assert [b["tokens_evaluated"] for b in listed] == [whole["tokens_evaluated"], len(_tokens(http, "Hello"))]
    legacy = _complete(http, "/v1/completions", prompt={"prompt_string": PROMPT}, max_tokens=6, temperature=0)
    assert legacy["choices"][0]["text"] == whole["content"]


@pytest.mark.parametrize("path", ["/completion", "/completions", "/v1/completions"])
@pytest.mark.parametrize("prompt", [
    {"prompt_string": PROMPT, "multimodal_data": ["aGVsbG8="]},
    ["Hello", {"prompt_string": PROMPT, "multimodal_data": ["aGVsbG8="]}],
])
def test_media_on_a_text_model_is_refused_as_llama_server_does(http, path, prompt):
    response = http.post(path, json={"prompt": prompt, "n_predict": 2, "max_tokens": 2})
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["message"]) == ("invalid_request_error", NO_MULTIMODAL)


@pytest.mark.parametrize("prompt", [[], [["a", "b"]], [{"text": "x"}], [[1, [2]]]])
def test_malformed_prompt_shapes_are_400(http, prompt):
    response = http.post("/completion", json={"prompt": prompt, "n_predict": 2})
    assert response.status_code == 400
    assert "prompt" in response.json()["error"]["message"]


def test_completions_without_v1_is_the_native_route(http):
    native = _complete(http, "/completions", prompt=PROMPT, **GREEDY)
    assert native["content"] == _complete(http, prompt=PROMPT, **GREEDY)["content"]
    assert {"content", "generation_settings", "stop_type", "timings"} <= set(native) and "choices" not in native
    legacy = _complete(http, "/v1/completions", prompt=[PROMPT, "Hello"], max_tokens=6, temperature=0)
    assert legacy["object"] == "text_completion"
    assert [c["index"] for c in legacy["choices"]] == [0, 1]
    assert legacy["choices"][0]["text"] == native["content"]


# -- probabilities ---------------------------------------------------------------------


def _check_pre_sampling(entry: dict, n_probs: int) -> None:
    assert set(entry) == {"id", "token", "bytes", "logprob", "top_logprobs"}
    top = entry["top_logprobs"]
    assert len(top) == n_probs
    assert all(set(t) == {"id", "token", "bytes", "logprob"} for t in top)
    values = [t["logprob"] for t in top]
    assert values == sorted(values, reverse=True) and all(v <= 0 for v in values)
    assert sum(math.exp(v) for v in values) <= 1 + 1e-4
    # greedy: the sampled token is the most likely one, with its log-probability
    assert entry["id"] == top[0]["id"] and entry["logprob"] == pytest.approx(top[0]["logprob"], abs=1e-5)
    assert bytes(entry["bytes"]).decode("utf-8", errors="replace").startswith(entry["token"])


def test_n_probs_lists_each_tokens_top_logprobs(http):
    body = _complete(http, prompt=PROMPT, n_probs=3, return_tokens=True, **GREEDY)
    probs = body["completion_probabilities"]
    assert len(probs) == body["tokens_predicted"] == 6
    assert [p["id"] for p in probs] == body["tokens"]
    for entry in probs:
        _check_pre_sampling(entry, 3)
    assert "".join(p["token"] for p in probs) == body["content"]
    assert body["generation_settings"]["n_probs"] == 3
    assert "completion_probabilities" not in _complete(http, prompt=PROMPT, **GREEDY)
    alias = _complete(http, prompt=PROMPT, logprobs=2, **GREEDY)  # llama-server's alias
    assert len(alias["completion_probabilities"][0]["top_logprobs"]) == 2


def test_n_probs_streamed_one_entry_per_token(http):
    whole = _complete(http, prompt=PROMPT, n_probs=4, **GREEDY)["completion_probabilities"]
    events = _stream(http, prompt=PROMPT, n_probs=4, **GREEDY)
    partials, final = events[:-1], events[-1]
    assert final["stop"] is True and "completion_probabilities" not in final
    assert all(len(e["completion_probabilities"]) == 1 for e in partials)
    streamed = [e["completion_probabilities"][0] for e in partials]
    assert [e["id"] for e in streamed] == [e["id"] for e in whole]
    for mine, other in zip(streamed, whole):
        _check_pre_sampling(mine, 4)
        assert mine["logprob"] == pytest.approx(other["logprob"], abs=1e-3)


def test_a_stop_word_cuts_its_tokens_from_the_probabilities(http):
    body = _complete(http, prompt=PROMPT, n_probs=1, temperature=0, n_predict=24, stop=["."])
    assert body["stop_type"] == "word"
    assert len(body["completion_probabilities"]) == body["tokens_predicted"] - len(_tokens(http, ".", False))


def test_post_sampling_probs_at_temperature_zero(http):
    body = _complete(http, prompt=PROMPT, n_probs=5, post_sampling_probs=True, return_tokens=True, **GREEDY)
    probs = body["completion_probabilities"]
    assert [p["id"] for p in probs] == body["tokens"]
    for entry in probs:
        assert set(entry) == {"id", "token", "bytes", "prob", "top_probs"}
        assert entry["prob"] == 1.0
        assert [(t["id"], t["prob"]) for t in entry["top_probs"]] == [(entry["id"], 1.0)]
    assert body["generation_settings"]["post_sampling_probs"] is True


def test_post_sampling_probs_are_the_candidates_the_sampler_kept(http):
    for events in (
        _complete(http, prompt=PROMPT, n_probs=10, post_sampling_probs=True, temperature=1.0, top_k=5, seed=1,
                  n_predict=6)["completion_probabilities"],
        [e["completion_probabilities"][0] for e in _stream(
            http, prompt=PROMPT, n_probs=10, post_sampling_probs=True, temperature=1.0, top_k=5, seed=1,
            n_predict=6)[:-1]],
    ):
        assert len(events) == 6
        for entry in events:
            top = entry["top_probs"]
            values = [t["prob"] for t in top]
            assert 1 <= len(top) <= 5 and values == sorted(values, reverse=True)
            assert all(0 < v <= 1 for v in values)
            assert sum(values) == pytest.approx(1.0, abs=1e-3)  # every survivor is listed
            assert entry["prob"] == pytest.approx({t["id"]: t["prob"] for t in top}[entry["id"]])


# -- logit_bias --------------------------------------------------------------------------


def _first_token(http, **body) -> int:
    return _complete(http, prompt=PROMPT, temperature=0, n_predict=1, return_tokens=True, **body)["tokens"][0]


def test_every_logit_bias_form_bans_the_greedy_token(http):
    greedy = _first_token(http)
    for bias in ({str(greedy): False}, {str(greedy): -100}, [[greedy, False]], [[greedy, -100]]):
        assert _first_token(http, logit_bias=bias) != greedy, bias


def test_a_positive_bias_forces_a_token(http):
    forced = _tokens(http, " banana", add_special=False)[0]
    assert _first_token(http, logit_bias={str(forced): 100}) == forced
    assert _first_token(http, logit_bias=[[forced, 100]]) == forced


def test_a_string_bias_bans_every_token_of_the_string(http):
    body = _complete(http, prompt=PROMPT, temperature=0, n_predict=12, return_tokens=True)
    text = body["content"][:12]
    banned = set(_tokens(http, text, add_special=False))
    assert banned & set(body["tokens"])
    for bias in ([[text, False]], {text: False}):
        again = _complete(http, prompt=PROMPT, temperature=0, n_predict=12, return_tokens=True, logit_bias=bias)
        assert not banned & set(again["tokens"]), bias
        reported = again["generation_settings"]["logit_bias"]
        assert {e["token"] for e in reported} == banned and all(e["bias"] is None for e in reported)


def test_ignore_eos_is_reported_as_an_eos_ban(http):
    plain = _complete(http, prompt=PROMPT, n_predict=1, logit_bias=[[5, 1.5]])["generation_settings"]
    assert plain["logit_bias"] == [{"bias": 1.5, "token": 5}] and plain["ignore_eos"] is False
    settings = _complete(http, prompt=PROMPT, n_predict=1, logit_bias=[[5, 1.5]],
                         ignore_eos=True)["generation_settings"]
    assert settings["ignore_eos"] is True
    first, *eog = settings["logit_bias"]
    assert first == {"bias": 1.5, "token": 5}
    end_of_text = _tokens(http, "<|im_end|>", add_special=False)
    assert eog and all(e["bias"] is None for e in eog) and set(end_of_text) <= {e["token"] for e in eog}


def test_generation_settings_carry_llama_server_fields(http):
    settings = _complete(http, prompt=PROMPT, n_predict=2)["generation_settings"]
    expected = {
        "seed", "temperature", "dynatemp_range", "dynatemp_exponent", "top_k", "top_p", "min_p", "top_n_sigma",
        "xtc_probability", "xtc_threshold", "typical_p", "repeat_last_n", "repeat_penalty", "presence_penalty",
        "frequency_penalty", "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n",
        "dry_sequence_breakers", "mirostat", "mirostat_tau", "mirostat_eta", "stop", "max_tokens", "n_predict",
        "n_keep", "ignore_eos", "stream", "logit_bias", "n_probs", "min_keep", "grammar", "samplers",
        "post_sampling_probs", "timings_per_token", "lora",
    }
    assert expected <= set(settings)
    assert settings["max_tokens"] == settings["n_predict"] == 2
    assert settings["logit_bias"] == [] and settings["n_probs"] == 0 and settings["stream"] is False
