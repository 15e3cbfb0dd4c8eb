"""llama-server's --models-preset: an INI file's sections served as models, each with
its keys as flags (`[*]` for all), the command line's flags winning, `load-on-startup`
loading at start, the file read again on /v1/reload; a key mlxcel cannot serve per
model stops the start in one line."""

from __future__ import annotations

import subprocess
import sys

from mlxcel.models.catalog import CATALOG
from mlxcel.models.store import model_path
from tests.server_process import ServerProcess

SMOL = model_path(CATALOG["smollm2-135m-instruct"])


def _n_ctx(client, model: str) -> int:
    answer = client.get(f"/props?model={model}")
    assert answer.status_code == 200, answer.text
    return answer.json()["default_generation_settings"]["n_ctx"]


def test_a_presets_models_with_their_flags(tmp_path):
    preset = tmp_path / "models.ini"
    preset.write_text(f"version = 1\n[*]\nc = 1024\nnp = 2\nngl = 99\n\n"
                      f"[smol]\nmodel = {SMOL}\nload-on-startup = true\n\n"
                      f"[short]\nm = {SMOL}\nc = 512\ntemp = 0\n")
    proc = ServerProcess("--models-preset", str(preset), "-np", "1", "--models-max", "1", model=None)
    try:
        proc.wait_ready(health_path="/health?ready=1")
        with proc.client() as client:
            rows = client.get("/v1/models").json()["data"]
            listed = {m["id"]: m.get("resident") for m in rows}
            sources = {m["id"]: (m["source"], m["can_remove"]) for m in rows}
            smol_ctx = _n_ctx(client, "smol")  # loaded at start
            answer = client.post("/v1/chat/completions", json={"model": "short", "max_tokens": 4,
                                                               "messages": [{"role": "user", "content": "Hi"}]})
            short_ctx = _n_ctx(client, "short")
            preset.write_text(preset.read_text() + f"\n[added]\nmodel = {SMOL}\n")
            reloaded = client.post("/v1/reload")
            listed_after = {m["id"] for m in client.get("/v1/models").json()["data"]}
        log = proc.log()
    finally:
        proc.stop()
    assert listed == {"smol": True, "short": False}
    assert sources == {"smol": ("preset", False), "short": ("preset", False)}
    assert smol_ctx == 1024  # [*]'s c, over the command line's one slot (its -np wins over the preset's 2)
    assert answer.status_code == 200 and answer.json()["model"] == "short", answer.text
    assert short_ctx == 512  # the section's c over [*]'s
    assert reloaded.status_code == 200 and listed_after == {"smol", "short", "added"}
    assert "tuning keys" in log and "ngl" in log


def test_a_key_mlxcel_cannot_serve_per_model_stops_the_start(tmp_path):
    preset = tmp_path / "models.ini"
    preset.write_text(f"[smol]\nmodel = {SMOL}\nreasoning-format = none\n")
    done = subprocess.run([sys.executable, "-m", "mlxcel", "serve", "--port", "0", "--models-preset", str(preset)],
                          capture_output=True, text=True, timeout=60)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert "[smol] reasoning-format: not supported in a preset" in lines[0]
