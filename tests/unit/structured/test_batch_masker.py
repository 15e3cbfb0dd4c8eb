from __future__ import annotations

import ctypes

import numpy as np
import pytest

from mlxcel.structured import BatchMasker, ResponseFormat, apply_mask, compile_constraint, logits_row, mask_words

SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    {"type": "array", "items": {"enum": ["x", "yy"]}},
    {"type": "string", "pattern": "^[a-f0-9]{4,8}$"},
]
PREFIXES = ['{"a": ', '["x", ', '"ab']


def constraints(tokenizer, lltokenizer):
    out = []
    for schema, prefix in zip(SCHEMAS, PREFIXES):
        spec = ResponseFormat.parse({"type": "json_schema", "json_schema": {"schema": schema}}).grammar_spec()
        constraint = compile_constraint(spec, lltokenizer)
        for token in tokenizer.encode(prefix, add_special=False):
            assert constraint.accept(token), constraint.error
        out.append(constraint)
    return out


def individual_masks(items, n_vocab):
    rows = np.zeros((len(items), mask_words(n_vocab)), dtype=np.int32)
    for constraint, row in zip(items, rows):
        constraint.fill_mask(row)
    return rows


def test_batch_equals_individual_masks(tokenizer, lltokenizer):
    items = constraints(tokenizer, lltokenizer)
    expected = individual_masks(items, tokenizer.n_vocab)
    assert len({row.tobytes() for row in expected}) == 3  # three different states
    masker = BatchMasker(tokenizer.n_vocab, max_rows=4, n_threads=2)
    assert np.array_equal(masker.fill(items), expected)
    assert np.array_equal(masker.fill(items[1:2]), expected[1:2])
    assert np.array_equal(masker.fill_async(items).result(), expected)
    masker.close()
    in_turn = BatchMasker(tokenizer.n_vocab, max_rows=4, min_parallel_rows=5)
    assert np.array_equal(in_turn.fill(items), expected)


def test_batch_rejects_more_constraints_than_rows(tokenizer, lltokenizer):
    masker = BatchMasker(tokenizer.n_vocab, max_rows=2)
    with pytest.raises(ValueError):
        masker.fill(constraints(tokenizer, lltokenizer))


def test_apply_mask_matches_the_bits(tokenizer, lltokenizer):
    row = individual_masks(constraints(tokenizer, lltokenizer)[:1], tokenizer.n_vocab)[0]
    logits = np.random.default_rng(1).standard_normal(tokenizer.n_vocab).astype(np.float32)
    masked = logits.copy()
    apply_mask(masked, row)
    allowed = np.array([(row[t // 32] >> (t % 32)) & 1 for t in range(tokenizer.n_vocab)], dtype=bool)
    assert 0 < allowed.sum() < tokenizer.n_vocab
    assert np.array_equal(masked[allowed], logits[allowed])
    assert np.all(np.isneginf(masked[~allowed]))


def test_apply_mask_rejects_a_wrong_row():
    with pytest.raises(ValueError):
        apply_mask(np.zeros(100, dtype=np.float32), np.zeros(3, dtype=np.int32))


def test_logits_row_is_a_writable_view(monkeypatch):
    from mlxcel.engine import llama_runtime

    buffer = (ctypes.c_float * 64)(*range(64))
    monkeypatch.setattr(llama_runtime, "_logits_address", lambda ctx, i: ctypes.addressof(buffer))
    view = logits_row(None, 0, 64)
    row = np.zeros(2, dtype=np.int32)
    row[0] = 0b101  # tokens 0 and 2
    apply_mask(view, row)
    assert buffer[0] == 0.0 and buffer[2] == 2.0
    assert buffer[1] == float("-inf") and buffer[63] == float("-inf")


def test_logits_row_of_an_output_without_logits_is_an_error_not_a_crash(monkeypatch):
    """llama_get_logits_ith answers NULL for an index without logits: the sampling of that
    request fails (the engine fails it alone), nothing reads address 0."""
    from mlxcel.engine import llama_runtime

    monkeypatch.setattr(llama_runtime, "_logits_address", lambda ctx, i: None)
    with pytest.raises(ValueError, match="no logits for batch output 3"):
        logits_row(None, 3, 64)
