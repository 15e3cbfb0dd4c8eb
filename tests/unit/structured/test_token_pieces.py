"""The tokenizer's packed piece table gives, for every token, the bytes llama.cpp's
own token_to_piece gives (control tokens render as nothing)."""

from __future__ import annotations


def test_every_piece_is_llama_cpps(tokenizer):
    for token in range(tokenizer.n_vocab):
        assert tokenizer.piece(token) == tokenizer._piece(token, special=False), token
    assert tokenizer.piece(tokenizer.eos) == b""  # a control token
