"""The native completion API's pure parts, read as llama-server reads them: how a
`prompt` splits into prompts, every `logit_bias` form, the probability entries of
`completion_probabilities`, and post-sampling probabilities from a real llama.cpp
sampler chain."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlxcel.engine.request import TokenEvent
from mlxcel.engine.sampling import SamplerChain, SamplingParams
from mlxcel.turn.completion_probs import FLOAT_LOWEST, MAX_N_PROBS, CompletionProbs, requested_n_probs
from mlxcel.turn.errors import InvalidRequest
from mlxcel.turn.logit_bias import parse_logit_bias, reported_logit_bias
from mlxcel.turn.prompts import BAD_ELEMENT, EMPTY, NO_MULTIMODAL, split_prompts, tokenize_prompts


class WordTokenizer:
    """Each character is a token (its code point); BOS is 1."""

    n_vocab = 1000

    def encode(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        return ([1] if add_special else []) + [ord(c) for c in text]

    def first_out_of_range(self, tokens):
        return next((t for t in tokens if not 0 <= t < self.n_vocab), None)

    def piece(self, token: int) -> bytes:
        return {7: "é".encode()[:1], 8: b""}.get(token, chr(token).encode())


TOK = WordTokenizer()


@pytest.mark.parametrize("prompt, n", [
    ("hi", 1),
    ([5, 6, 7], 1),  # a token array
    (["a", 5, "b"], 1),  # mixed: any integer makes the array one prompt
    ([5, "a"], 1),
    (["a", "b", "c"], 3),  # strings only: a list of prompts
    ([[5, 6], [7]], 2),  # token arrays
    ([["a", 5], "b"], 2),  # a mixed prompt inside a list
    ({"prompt_string": "x"}, 1),
    ([{"prompt_string": "x"}, "y"], 2),
    (["only"], 1),
])
def test_prompt_split_follows_llama_server(prompt, n):
    assert len(split_prompts(prompt)) == n


def test_prompts_tokenize_in_order_with_bos_before_a_leading_string_only():
    assert tokenize_prompts(TOK, ["ab", [5, 6], {"prompt_string": "c"}], 4) == [[1, 97, 98], [5, 6], [1, 99]]
    assert tokenize_prompts(TOK, ["a", 5, "b"], 4) == [[1, 97, 5, 98]]
    assert tokenize_prompts(TOK, [5, "b"], 4) == [[5, 98]]


@pytest.mark.parametrize("prompt, message", [
    ({"prompt_string": "x", "multimodal_data": ["aGk="]}, NO_MULTIMODAL),
    ([{"prompt_string": "x", "multimodal_data": []}], NO_MULTIMODAL),  # the key alone, as llama-server
    ({"text": "x"}, BAD_ELEMENT),
    ([["a", "b"]], BAD_ELEMENT),  # strings alone nest only as the list of prompts itself
    ([[5, [6]]], BAD_ELEMENT),
    ([], EMPTY),
])
def test_prompt_refusals_carry_llama_server_messages(prompt, message):
    with pytest.raises(InvalidRequest) as caught:
        tokenize_prompts(TOK, prompt, 4)
    assert caught.value.message == message


def test_prompt_limits_and_vocabulary():
    with pytest.raises(InvalidRequest, match="max-prompts"):
        tokenize_prompts(TOK, ["a", "b", "c"], 2)
    with pytest.raises(InvalidRequest, match="out of vocabulary"):
        tokenize_prompts(TOK, [5, 1000], 2)


@pytest.mark.parametrize("raw, expected", [
    ({"5": 2.5}, {5: 2.5}),  # OpenAI's object
    ({"5": False, "6": True}, {5: -math.inf}),  # false bans, true is no bias
    ({"5": -100}, {5: -100.0}),  # as given, as llama-server adds it (no -inf)
    ([[5, 1], [6, False]], {5: 1.0, 6: -math.inf}),  # llama-server's pairs
    ([["ab", -2]], {97: -2.0, 98: -2.0}),  # a string: every token of it, no BOS
    ({"ab": 3}, {97: 3.0, 98: 3.0}),  # an object key that is no number is a string
    ([["aa", 1]], {97: 2.0}),  # entries for one token add up
])
def test_every_logit_bias_form(raw, expected):
    assert parse_logit_bias(raw, TOK) == expected


@pytest.mark.parametrize("raw", [[[1]], [[1, 2, 3]], {"5": 101}, {"1000": 1}, [[5, "x"]], [[1.5, 1]]])
def test_bad_logit_bias_is_refused(raw):
    with pytest.raises(InvalidRequest):
        parse_logit_bias(raw, TOK)


def test_logit_bias_is_reported_as_llama_server_does():
    assert reported_logit_bias({5: 1.5, 6: -math.inf}, [2, 0]) == [
        {"bias": 1.5, "token": 5}, {"bias": None, "token": 6}, {"bias": None, "token": 2}, {"bias": None, "token": 0}]


def test_n_probs_off_and_capped():
    assert [requested_n_probs(n) for n in (None, 0, -3, 5, 10_000)] == [None, None, None, 5, MAX_N_PROBS]


def test_pre_sampling_entry_shape():
    entry = CompletionProbs(TOK, post_sampling=False).entry(
        TokenEvent(token=97, text="a", logprob=-0.5, top_logprobs=[(97, -0.5), (7, -math.inf)]))
    assert entry == {"id": 97, "token": "a", "bytes": [97], "logprob": -0.5, "top_logprobs": [
        {"id": 97, "token": "a", "bytes": [97], "logprob": -0.5},
        {"id": 7, "token": "", "bytes": [0xC3], "logprob": FLOAT_LOWEST}]}  # half a character: no text


def test_post_sampling_entry_shape():
    entry = CompletionProbs(TOK, post_sampling=True).entry(
        TokenEvent(token=98, text="b", prob=0.75, top_probs=[(98, 0.75), (97, 0.25)]))
    assert entry == {"id": 98, "token": "b", "bytes": [98], "prob": 0.75, "top_probs": [
        {"id": 98, "token": "b", "bytes": [98], "prob": 0.75}, {"id": 97, "token": "a", "bytes": [97], "prob": 0.25}]}


LOGITS = np.log(np.array([0.05, 0.5, 0.2, 0.15, 0.1], dtype=np.float32))


def _chain(**params) -> SamplerChain:
    return SamplerChain(SamplingParams(seed=3, min_p=0.0, top_p=1.0, **params), None, len(LOGITS), 64)


def test_post_sampling_probs_are_the_surviving_candidates():
    chain = _chain(temperature=1.0, top_k=3)
    try:
        token, prob, top = chain.sample_with_probs(LOGITS.copy(), 5)
    finally:
        chain.free()
    assert [t for t, _ in top] == [1, 2, 3]  # top-k left three
    assert sum(p for _, p in top) == pytest.approx(1.0)
    assert top[0][1] == pytest.approx(0.5 / 0.85, rel=1e-5)
    assert token in (1, 2, 3) and prob == dict(top)[token]


def test_post_sampling_probs_of_a_greedy_chain():
    chain = _chain(temperature=0.0, logit_bias={1: -math.inf})
    try:
        assert chain.sample_with_probs(LOGITS.copy(), 3) == (2, 1.0, [(2, 1.0)])
    finally:
        chain.free()


def test_soft_limits_clamp_numbers_and_leave_the_rest_to_validation():
    from mlxcel.api.native.wire import clamp_soft_limits

    body = {"prompt": "x", "temperature": -1, "top_k": -3, "top_p": 1.5, "mirostat": 5, "repeat_last_n": -9}
    assert clamp_soft_limits(body) == {"prompt": "x", "temperature": 0, "top_k": 0, "top_p": 1.0, "mirostat": 5,
                                       "repeat_last_n": -9}  # not soft here: validation refuses them
    assert body["temperature"] == -1  # the caller's body is not changed
    for value in ("hot", True, None, float("nan"), float("inf")):
        assert clamp_soft_limits({"temperature": value})["temperature"] is value  # validation's to refuse
    assert clamp_soft_limits({"temperature": 0.7, "top_k": 40}) == {"temperature": 0.7, "top_k": 40}
    assert clamp_soft_limits([1, 2]) == [1, 2]


def test_tokenize_reads_a_null_flag_as_its_default():
    """llama-server reads a null as the field's default; `content` stays required."""
    from mlxcel.api.native.wire import TokenizeRequest

    request = TokenizeRequest.model_validate({"content": "hi", "add_special": None, "with_pieces": None,
                                              "parse_special": None})
    assert (request.add_special, request.parse_special, request.with_pieces) == (False, True, False)
    with pytest.raises(ValueError):
        TokenizeRequest.model_validate({"content": None})
