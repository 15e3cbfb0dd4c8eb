"""The reference llama-server (built by bench/reference.py from the llama.cpp that
llama-cpp-python vendors) as a test subprocess, for tests that send the same request
to both servers and compare what comes back."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

from mlxcel.engine.weight_buffers import reference_repack_flags
from tests.server_process import ServerProcess, free_port

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path.home() / ".cache" / "mlxcel" / "models"
BUILD_HINT = "build it with `make reference` (bench/reference.py; 10-15 minutes on 2 cores)"


def _bench_reference():
    spec = importlib.util.spec_from_file_location("bench_reference", ROOT / "bench" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference_binary() -> Path | None:
    """The built llama-server, or None when it has not been built."""
    override = os.environ.get("MLXCEL_REFERENCE_SERVER")
    binary = Path(override) if override else _bench_reference().binary_path()
    return binary if binary.is_file() else None


def same_attention(ours: ServerProcess) -> list[str]:
    """llama-server's -fa for the attention kernel mlxcel's context runs (its /props):
    on a CPU mlxcel's auto times both kernels and may keep plain attention where
    llama-server's auto takes flash, and greedy text is compared token for token."""
    with ours.client() as client:
        chosen = client.get("/props").json().get("flash_attn", "auto")
    return ["-fa", chosen] if chosen in ("on", "off") else []


class ReferenceServer(ServerProcess):
    """llama-server on a free loopback port, with the given flags; waited for, queried
    and stopped as a ServerProcess is."""

    def __init__(self, binary: Path, model_file: str, *args: str) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"llama-server-test-{self.port}.log"
        command = [str(binary), "-m", str(MODELS / model_file), "--host", "127.0.0.1",
                   "--port", str(self.port), "-t", "2", "--no-webui", *reference_repack_flags(), *args]
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)
