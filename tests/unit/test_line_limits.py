"""llama-server's n_indent and t_max_predict_ms stops, fed token texts as the engine
feeds them; and the request-side pieces around them (n_cmpl layout, response_fields,
LoRA, SSE pings)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mlxcel.api.native.answer import selected_fields
from mlxcel.engine.line_limits import LineLimits
from mlxcel.turn.errors import InvalidRequest
from mlxcel.turn.prompts import per_completion
from mlxcel.turn.sampling_fields import SamplingFields


def run(limits: LineLimits, pieces: list[str], elapsed: float = 0.0) -> tuple[str, bool]:
    out = ""
    for piece in pieces:
        text, stop = limits.feed(piece, elapsed)
        out += text
        if stop:
            return out, True
    return out, False


def test_the_first_line_is_free_and_later_lines_need_the_indent():
    assert run(LineLimits(n_indent=4), ["x = 1", "\n", "    y", " = 2\n", "  z"]) == ("x = 1\n    y = 2\n  ", True)
    assert run(LineLimits(n_indent=4), ["if a:", "\n\t\t\t\tb", "\n", "    ", "c"]) == ("if a:\n\t\t\t\tb\n    c", False)


def test_a_cut_falls_inside_a_token():
    assert run(LineLimits(n_indent=1), ["a\n", " b\nc = 3"]) == ("a\n b\n", True)
    assert run(LineLimits(n_indent=2), ["a\n", " b\nc = 3"]) == ("a\n ", True)


def test_blank_lines_do_not_stop():
    assert run(LineLimits(n_indent=8), ["a\n", "\n", "   \n", "        b"]) == ("a\n\n   \n        b", False)


def test_time_limit_stops_only_at_a_newline():
    limits = LineLimits(t_max_predict_ms=100)
    assert limits.feed("slow text", 500.0) == ("slow text", False)
    assert limits.feed("more\n", 50.0) == ("more\n", False)
    assert limits.feed("end\n", 150.0) == ("end\n", True)


def test_no_limits_no_state():
    assert LineLimits.for_request(0, 0) is None and LineLimits.for_request(0, -1) is None


def test_completions_are_laid_out_prompt_major_and_bounded():
    assert per_completion([[1], [2]], 2, 4) == [[1], [1], [2], [2]]
    with pytest.raises(InvalidRequest, match="n_cmpl"):
        per_completion([[1]], 5, 4)


def test_response_fields_keep_what_is_named_by_path():
    body = {"content": "x", "generation_settings": {"n_predict": 4}, "stop": True}
    assert selected_fields(body, ["content", "generation_settings/n_predict", "missing", "stop/x"]) == {
        "content": "x", "generation_settings/n_predict": 4}
    assert selected_fields(body, None) is body


def test_lora_lists_are_bounded_and_pings_resolve():
    assert SamplingFields(lora=[]).lora == []
    assert SamplingFields(lora=[{"id": 0, "scale": 1.0}]).lora == [{"id": 0, "scale": 1.0}]  # checked at build
    with pytest.raises(ValidationError):
        SamplingFields(lora=[{"id": i} for i in range(65)])
    assert SamplingFields().ping_seconds(30) == 30.0
    assert SamplingFields(sse_ping_interval=-1).ping_seconds(30) is None
    assert SamplingFields(sse_ping_interval=2).ping_seconds(0) == 2.0
