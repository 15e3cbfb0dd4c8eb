"""`mlxcel serve --config FILE` refuses a bad file at start with one line naming the
file, the key and the reason, before loading anything."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlxcel", "serve", *args, "--port", "0"], capture_output=True, check=False,
                          text=True, timeout=60)


@pytest.mark.parametrize("text, key", [
    ("models:\n  smol:\n    path: smollm2-135m-instruct\n    pinned: true\n", "models.smol.pinned"),
    ("models:\n  smol:\n    path: smollm2-135m-instruct\n    ttl_s: -5\n", "models.smol.ttl_s"),
    ("models:\n  smol:\n    path: smollm2-135m-instruct\nserver:\n  budget_gb: nope\n", "server.budget_gb"),
    ("models:\n  smol:\n    path: smollm2-135m-instruct\naliases:\n  x: nothing\n", "aliases.x"),
    ("models:\n  smol:\n    path: smollm2-135m-instruct\n    adapter: {a: 1}\n", "models.smol.adapter"),
])
def test_a_bad_config_fails_the_start_in_one_line(tmp_path, text, key):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    result = _serve("--config", str(path))
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert str(path.name) in lines[0] and key in lines[0], lines[0]


def test_config_and_model_flag_together_are_refused(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("models:\n  smol:\n    path: smollm2-135m-instruct\n")
    result = _serve("--config", str(path), "-m", "smollm2-135m-instruct")
    assert result.returncode == 2 and "--config" in result.stderr


def test_a_missing_config_file_is_one_line(tmp_path):
    result = _serve("--config", str(tmp_path / "absent.yaml"))
    assert result.returncode == 2 and "absent.yaml" in result.stderr
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1
