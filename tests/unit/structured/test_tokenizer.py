from __future__ import annotations

import time

import llguidance

from mlxcel.structured import build_lltokenizer, grammar_tokenizer


def test_builds_from_the_real_vocabulary(tokenizer, lltokenizer):
    assert isinstance(lltokenizer, llguidance.LLTokenizer)
    assert lltokenizer.vocab_size == tokenizer.n_vocab == 49152
    assert sorted(lltokenizer.eos_tokens) == sorted(tokenizer.eog_tokens)


def test_is_cached_per_model(tokenizer, lltokenizer):
    assert grammar_tokenizer(tokenizer) is lltokenizer


def test_build_time_is_bounded(tokenizer):
    started = time.perf_counter()
    build_lltokenizer(tokenizer)
    assert time.perf_counter() - started < 5.0  # ~0.15 s measured for 49k tokens


def test_token_bytes_match_the_engine_pieces(tokenizer, lltokenizer):
    text = '{"name": "Zoë", "n": 42}\n'
    tokens = tokenizer.encode(text, add_special=False)
    assert lltokenizer.decode_bytes(tokens) == text.encode()
    assert lltokenizer.tokenize_str(text) == tokens  # llama.cpp's own tokenizer


def test_control_tokens_are_special(tokenizer, lltokenizer):
    im_start = tokenizer.encode("<|im_start|>", add_special=False)
    assert len(im_start) == 1
    assert lltokenizer.is_special_token(im_start[0])
    for token in tokenizer.eog_tokens:
        assert lltokenizer.is_special_token(token)
    assert not lltokenizer.is_special_token(tokenizer.encode("{", add_special=False)[0])
