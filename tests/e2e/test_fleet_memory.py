"""Many models in one server: memory given back across model swaps. SmolLM2-135M and
Gemma-3-270M alternate with one model resident, so each request unloads one model
(least recently used) and loads the other. An unloaded engine's objects refer to each
other in cycles and were freed only by a distant full collection, and that unload
never trimmed the heap: the process grew by about 13 MiB a load. Now the cyclic
collector runs and the heap is trimmed after each unload (page_calls.give_back_memory),
and the process's anonymous memory must stay level."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.server_process import ServerProcess

CONFIG = """
server:
  max_models: 1
  defaults: {model: smol, ttl_s: 0}
models:
  smol: {path: smollm2-135m-instruct, ctx_size: 1024, parallel: 2}
  gemma: {path: gemma-3-270m, ctx_size: 1024, parallel: 2}
"""

SWAPS = 16


def anonymous_mib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) >> 10
    raise AssertionError("no Anonymous line")


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="reads /proc/PID/smaps_rollup")
def test_alternating_models_does_not_grow_the_process(tmp_path):
    path = tmp_path / "swap.yaml"
    path.write_text(CONFIG)
    proc = ServerProcess("--config", str(path), model=None)
    try:
        proc.wait_ready(health_path="/health?ready=1")
        seen = []
        with proc.client() as client:
            for swap in range(SWAPS):
                model = ("smol", "gemma")[swap % 2]
                answer = client.post("/v1/chat/completions", json={
                    "model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
                assert answer.status_code == 200, answer.text
                assert answer.json()["model"] == model
                seen.append(anonymous_mib(proc.process.pid))
        # the same model resident at both points; the first swaps settle the allocator
        grown = seen[-1] - seen[3]
        assert grown < 60, f"anonymous MiB after each load: {seen}"
    finally:
        proc.stop()
