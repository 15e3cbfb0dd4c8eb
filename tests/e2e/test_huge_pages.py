"""Memory under a llama context: its cleared KV cache holds no pages until its cells are
used, and the rest of its buffers go on transparent huge pages."""
from __future__ import annotations

import re
from pathlib import Path

from mlxcel.engine.huge_pages import thp_available
from tests.server_process import ServerProcess


def anon_huge_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    raise AssertionError("no AnonHugePages line")


def anonymous_mappings(pid: int) -> list[tuple[int, int]]:
    """(size KiB, resident KiB) of each anonymous mapping of the process."""
    out, header = [], None
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if not line[:1].isupper():
            header = fields
        elif fields[0] == "Size:":
            size = int(fields[1])
        elif fields[0] == "Rss:" and header is not None and len(header) == 5:
            out.append((size, int(fields[1])))
    return out


def test_a_fresh_kv_cache_holds_only_the_cells_used():
    # SmolLM2-135M, -c 16384: the KV cache is 16384 x 30 layers x 2 x 192 x 2 bytes = 360 MiB
    proc = ServerProcess("-c", "16384", "-np", "2")
    try:
        server = proc.wait_ready()
        with server.client() as http:
            r = http.post("/completion", json={"prompt": "The capital of France is", "n_predict": 16,
                                               "temperature": 0, "ignore_eos": True})
            assert r.status_code == 200 and r.json()["tokens_predicted"] == 16
            dropped = re.search(r"the KV cache's (\d+) MiB of cleared pages dropped", server.log())
            assert dropped and int(dropped.group(1)) >= 355, server.log()[-2000:]
            # the mapping that holds it: at least as large as the cache, and nearly none of it resident
            holding = [(size, rss) for size, rss in anonymous_mappings(server.process.pid) if size >= 355 * 1024]
            assert holding and all(rss < size // 10 for size, rss in holding), holding
            # and it still computes: the same greedy answer once the cells were written again
            again = http.post("/completion", json={"prompt": "The capital of France is", "n_predict": 16,
                                                   "temperature": 0, "ignore_eos": True, "cache_prompt": False})
            assert again.json()["content"] == r.json()["content"]
    finally:
        proc.stop()


def test_the_compute_buffer_is_on_huge_pages_and_the_server_answers(server, http):
    r = http.post("/completion", json={"prompt": "The capital of France is", "n_predict": 8, "temperature": 0})
    assert r.status_code == 200 and r.json()["content"]
    found = re.search(r"the context.s buffers on transparent huge pages: (\d+) MiB advised", server.log())
    if not thp_available():  # a kernel with THP `never`: nothing asked, nothing said
        assert found is None
        return
    assert found, "the server did not put its context's buffers on huge pages"
    # SmolLM2-135M's compute buffer holds a 512-token micro-batch's logits: 512 x 49152 x 4 bytes = 96 MiB
    assert int(found.group(1)) >= 90, found.group(0)
    assert anon_huge_kib(server.process.pid) >= 2048  # what the decodes touched came in huge pages
