"""llama-server's `timings` rates (engine/request.py Timings): the generation rates
count decode steps, one fewer than the tokens (the first comes from the prompt's
logits at the start of predicted_ms), as llama-server's server_slot_stats does."""

from __future__ import annotations

import pytest

from mlxcel.engine.request import Timings


def test_generation_rates_count_decode_steps_as_llama_server():
    # llama-server 0.3.36 for 10 tokens in 189.006 ms: 21.000666... ms a token, 47.6175... a second
    timings = Timings(prompt_n=4, prompt_ms=80.0, predicted_n=10, predicted_ms=189.006).to_dict()
    assert timings["predicted_per_token_ms"] == pytest.approx(21.000666666666667)
    assert timings["predicted_per_second"] == pytest.approx(47.617535951239645)
    assert timings["prompt_per_token_ms"] == 20.0 and timings["prompt_per_second"] == 50.0


def test_one_token_has_no_generation_rate():
    timings = Timings(prompt_n=4, prompt_ms=80.0, predicted_n=1, predicted_ms=0.01).to_dict()
    assert timings["predicted_per_token_ms"] == 0.0 and timings["predicted_per_second"] == 0.0
