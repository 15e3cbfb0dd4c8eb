"""The shared server's context buffers sit on transparent huge pages: its KV cache,
cleared (so resident) when the context is made, is collapsed into 2 MiB pages at start."""
from __future__ import annotations

import re
from pathlib import Path

from mlxcel.engine.huge_pages import thp_available


def anon_huge_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    raise AssertionError("no AnonHugePages line")


def test_the_kv_cache_is_collapsed_into_huge_pages_and_the_server_answers(server, http):
    r = http.post("/completion", json={"prompt": "The capital of France is", "n_predict": 8, "temperature": 0})
    assert r.status_code == 200 and r.json()["content"]
    found = re.search(r"the context.s buffers on transparent huge pages: (\d+) MiB advised, (\d+) MiB of it "
                      r"resident and collapsed", server.log())
    if not thp_available():  # a kernel with THP `never`: nothing asked, nothing said
        assert found is None
        return
    assert found, "the server did not put its context's buffers on huge pages"
    advised, collapsed = int(found.group(1)), int(found.group(2))
    # SmolLM2-135M, -c 4096: the KV cache alone is 4096 x 30 layers x 2 x 192 x 2 bytes = 90 MiB
    assert advised >= 90 and collapsed >= 60, (advised, collapsed)
    assert anon_huge_kib(server.process.pid) >= collapsed * 1024
