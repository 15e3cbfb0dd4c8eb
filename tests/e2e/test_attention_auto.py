"""-fa auto on a CPU: the first start with a model times flash and plain attention,
serves with the cheaper, and keeps the timings; the next start reads them back; an
explicit -fa is never second-guessed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.server_process import ServerProcess

MODEL = Path.home() / ".cache/mlxcel/models/SmolLM2-135M-Instruct.Q4_1.gguf"
CHOICE = re.compile(r"flash attention \(-fa auto\): (on|off) \((timed now|timed at an earlier start)")


def start(home: Path, *args: str) -> tuple[str, str, str]:
    """(its /props flash_attn, its log, a greedy completion) of a server on `home`."""
    proc = ServerProcess("-c", "1024", "-np", "1", *args, model=str(MODEL),
                         env={"MLXCEL_HOME": str(home), "MLXCEL_SPEC_COST_MODEL": "0"})
    try:
        proc.wait_ready()
        with proc.client() as client:
            chosen = client.get("/props").json()["flash_attn"]
            text = client.post("/completion", json={"prompt": "The capital of France is", "n_predict": 8,
                                                    "temperature": 0}).json()["content"]
        return chosen, proc.log(), text
    finally:
        proc.stop()


def test_auto_times_both_kernels_once_and_serves_with_the_choice(tmp_path):
    home = tmp_path / "home"
    chosen, log, text = start(home)
    first = CHOICE.search(log)
    if first is None:  # timed while other work held the cores: llama.cpp decides, nothing kept
        assert "flash attention (-fa auto): llama.cpp's auto" in log and chosen == "auto"
        assert not list((home / "attention").glob("*.json"))
        pytest.skip("the attention kernels were timed against other work on this machine")
    assert first.group(2) == "timed now" and chosen == first.group(1)
    assert text.strip()
    [saved] = (home / "attention").glob("*.json")
    timings = json.loads(saved.read_text())
    assert set(timings) == {"flash", "plain"}
    assert all(timings[k]["step_deep"] > 0 and timings[k]["prefill_per_token"] > 0 for k in timings)

    again, log, _ = start(home)
    second = CHOICE.search(log)
    assert second is not None and second.groups() == (chosen, "timed at an earlier start") and again == chosen


def test_an_explicit_flash_attn_is_served_as_given_without_timing(tmp_path):
    home = tmp_path / "home"
    for value in ("on", "off"):
        chosen, log, text = start(home, "-fa", value)
        assert chosen == value and "flash attention (-fa auto)" not in log and text.strip()
    assert not (home / "attention").exists()


def test_plain_attention_whose_scores_could_take_an_eighth_of_the_memory_is_never_timed(tmp_path):
    """An 8,192-token micro-batch against an 8,192-token slot: SmolLM2's 9 heads would need
    4.5 GiB of scores without flash attention. Where that passes an eighth of the machine's
    memory (a 24 GiB host) auto keeps flash attention untimed; elsewhere it times both."""
    from mlxcel.engine.attention_choice import plain_scores_bytes
    from mlxcel.engine.host_memory import read_host_memory

    home = tmp_path / "home"
    chosen, log, text = start(home, "-c", "8192", "-b", "8192", "-ub", "8192")  # the last -c counts
    assert text.strip()
    if plain_scores_bytes(8192, 8192, 9) > read_host_memory().total_bytes / 8:
        assert chosen == "on" and "MiB of memory; not timed" in log and "4608 MiB" in log
        assert not (home / "attention").exists()
    else:
        assert CHOICE.search(log) or "llama.cpp's auto" in log
