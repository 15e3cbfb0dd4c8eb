"""After the load, a server with its model memory-mapped holds only the file pages
llama.cpp reads again: not those of the weights it copied into CPU_REPACK's layout
(Qwen2.5-Coder-0.5B Q4_K_M: 12 feed-forward matrices, ~29 MiB), nor the embedding rows
of tokens no request has used. It still answers as before."""
from __future__ import annotations

import re
from pathlib import Path

from mlxcel.engine.weight_pages import resident_kib


def model_file_kib(pid: int, path: str) -> int:
    """Resident KiB of the server's mappings of `path`."""
    return resident_kib({path}, Path(f"/proc/{pid}/smaps").read_text())


def dropped_model_path(pid: int, log: str) -> str:
    """The file whose pages the server's log says it dropped, as the server maps it."""
    name = re.search(r"dropped the \d+ MiB of (\S+)'s mapped pages", log).group(1)
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].endswith("/" + name):
            return fields[5]
    raise AssertionError(f"{name} is not mapped by the server")


def test_the_pages_of_repacked_weights_are_not_held(qwen_client, qwen):
    reply = qwen_client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Write a Python function that adds two numbers."}],
        max_tokens=24, temperature=0)
    assert reply.choices[0].message.content
    log = qwen.log()
    path = dropped_model_path(qwen.process.pid, log)
    held = int(re.search(r"dropped the (\d+) MiB", log).group(1))
    size_kib = Path(path).stat().st_size // 1024
    assert held * 1024 >= size_kib * 0.9  # the load had mapped (nearly) the whole file in
    resident = model_file_kib(qwen.process.pid, path)
    assert 0 < resident <= size_kib - 20 * 1024, (resident, size_kib)


def test_a_model_whose_weights_are_all_read_maps_them_back(server, http):
    r = http.post("/completion", json={"prompt": "The capital of France is", "n_predict": 8, "temperature": 0})
    assert r.status_code == 200 and r.json()["content"]
    path = dropped_model_path(server.process.pid, server.log())
    # SmolLM2's output layer is its embedding table: every decode reads the whole file again
    assert model_file_kib(server.process.pid, path) >= Path(path).stat().st_size // 1024 * 0.9
