"""Media positions in a prompt: lookups the engine's prefill planning relies on, and
the stand-in ids that let prefix caching treat equal media as equal tokens."""

from __future__ import annotations

import numpy as np

from mlxcel.engine.media_prefill import plan_media_chunk
from mlxcel.engine.media_span import MediaLayout, MediaSpan, is_stand_in, stand_in_tokens
from mlxcel.engine.request import GenerationRequest
from mlxcel.engine.slots import Slot, SlotState


def span(start: int, n: int, non_causal: bool = False) -> MediaSpan:
    return MediaSpan(start, np.zeros((n, 4), np.float32), non_causal)


def test_stand_ins_are_negative_deterministic_and_differ_by_content():
    a, b = stand_in_tokens(b"a", 64), stand_in_tokens(b"b", 64)
    assert a == stand_in_tokens(b"a", 64) and a != b
    assert all(is_stand_in(t) for t in a + b) and not is_stand_in(-1) and not is_stand_in(0)


def test_text_runs_stop_at_media_and_are_empty_inside_it():
    layout = MediaLayout((span(10, 5), span(15, 5), span(30, 4)))  # two frames back to back, then another
    assert layout.text_run(0, 100) == 10
    assert layout.text_run(4, 3) == 3
    assert layout.text_run(10, 100) == 0 and layout.text_run(12, 100) == 0
    assert layout.text_run(15, 100) == 0  # the second frame starts where the first ends
    assert layout.text_run(20, 100) == 10
    assert layout.text_run(34, 100) == 100
    assert layout.at(14).start == 10 and layout.at(15).start == 15 and layout.at(20) is None


def test_a_kept_prefix_never_ends_inside_a_non_causal_span():
    layout = MediaLayout((span(4, 8, non_causal=True), span(20, 8)))
    assert layout.safe_prefix(7) == 4
    assert layout.safe_prefix(12) == 12 and layout.safe_prefix(4) == 4
    assert layout.safe_prefix(23) == 23  # a causal span may be kept in part


def test_the_widest_non_causal_span_is_what_must_fit_one_micro_batch():
    assert MediaLayout((span(0, 64), span(70, 8))).widest_non_causal() == 0  # causal spans may be split
    assert MediaLayout((span(0, 36, non_causal=True), span(40, 64), span(110, 20, True))).widest_non_causal() == 36


def _prefilling(n_past: int, layout: MediaLayout, length: int) -> Slot:
    slot = Slot(id=0, state=SlotState.PREFILL)
    slot.request = GenerationRequest(prompt_tokens=[1] * length, emit=lambda event: None, media=layout)
    slot.cached_tokens = [1] * n_past
    return slot


def test_media_chunks_are_bounded_like_text_chunks_unless_non_causal():
    causal = _prefilling(10, MediaLayout((span(10, 64),)), 80)
    chunk = plan_media_chunk([causal], budget=16)
    assert (chunk.offset, chunk.n, chunk.last) == (0, 16, False)
    whole = _prefilling(10, MediaLayout((span(10, 64, non_causal=True),)), 74)
    chunk = plan_media_chunk([whole], budget=16)
    assert (chunk.n, chunk.last) == (64, True)
    at_text = _prefilling(5, MediaLayout((span(10, 64),)), 80)
    assert plan_media_chunk([at_text], budget=16) is None
