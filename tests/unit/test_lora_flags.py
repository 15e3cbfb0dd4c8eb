"""--lora / --lora-scaled / --lora-init-without-apply as llama-server reads them, and
the `[{id, scale}]` lists of /lora-adapters and a request's `lora` field."""

from __future__ import annotations

import pytest

from mlxcel.cli.serve_args import parse_serve_args
from mlxcel.cli.usage import UsageError
from mlxcel.engine.lora import LoraAdapter, LoraError, requested_scales
from mlxcel.turn.errors import InvalidRequest
from mlxcel.turn.request_builder import request_lora


def test_adapters_in_order_with_their_scales(tmp_path):
    a, b, c = (tmp_path / f"{name}.gguf" for name in "abc")
    for path in (a, b, c):
        path.write_bytes(b"")
    config = parse_serve_args(["--lora", f"{a},{b}", "--lora-scaled", f"{c}:0.5"])
    assert config.lora == ((str(a), 1.0), (str(b), 1.0), (str(c), 0.5))
    assert config.ignored_flags == []
    held = parse_serve_args(["--lora-scaled", f"{c}:0.5", "--lora-init-without-apply"])
    assert held.lora == ((str(c), 0.0),)
    with pytest.raises(UsageError, match="FNAME:SCALE"):
        parse_serve_args(["--lora-scaled", f"{c}:nan"])


def _adapters(*scales: float) -> list[LoraAdapter]:
    return [LoraAdapter(f"/a{i}.gguf", scale, None) for i, scale in enumerate(scales)]


def test_listed_ids_get_their_scale_and_the_others_zero():
    assert requested_scales(_adapters(1.0, 1.0), [{"id": 1, "scale": 0.25}]) == [0.0, 0.25]
    assert requested_scales(_adapters(1.0), [{"id": 0}]) == [1.0]  # the scale defaults to 1
    assert requested_scales(_adapters(1.0), []) == [0.0]
    for entries in ([{"id": 2}], [{"id": -1}], [{"id": "0"}], [{"id": True}], [{"id": 0, "scale": float("inf")}],
                    [{"id": 0, "scale": "1"}], [5], [{"id": 0, "scale": 1e300}], [{"id": 0, "scale": -1001}]):
        with pytest.raises(LoraError):
            requested_scales(_adapters(1.0), entries)


def test_a_request_asks_for_its_own_scales_or_runs_with_the_servers():
    assert request_lora([{"id": 0, "scale": 0.5}], _adapters(1.0, 1.0)) == (0.5, 0.0)
    assert request_lora([{"id": 1}], _adapters(1.0, 0.0)) == (0.0, 1.0)
    assert request_lora([], _adapters(1.0)) is None and request_lora(None, []) is None  # the server's
    with pytest.raises(InvalidRequest, match="invalid adapter id"):
        request_lora([{"id": 0}], [])
    with pytest.raises(InvalidRequest, match="finite"):
        request_lora([{"id": 0, "scale": float("nan")}], _adapters(1.0))


def test_adapters_belong_to_one_model_not_to_a_fleet(tmp_path):
    adapter = tmp_path / "a.gguf"
    adapter.write_bytes(b"")
    for flag in ("--lora", "--control-vector"):
        with pytest.raises(UsageError, match="belong to one model"):
            parse_serve_args(["--models-dir", str(tmp_path), flag, str(adapter)])
