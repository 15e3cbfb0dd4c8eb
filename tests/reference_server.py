"""The reference llama-server (built by bench/reference.py from the llama.cpp that
llama-cpp-python vendors) as a test subprocess, for tests that send the same request
to both servers and compare what comes back."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import time
from pathlib import Path

import httpx

from tests.server_process import free_port

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


class ReferenceServer:
    """llama-server on a free loopback port, with the given flags."""

    def __init__(self, binary: Path, model_file: str, *args: str) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"llama-server-test-{self.port}.log"
        command = [str(binary), "-m", str(MODELS / model_file), "--host", "127.0.0.1",
                   "--port", str(self.port), "-t", "2", "--no-webui", *args]
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)

    def wait_ready(self, timeout: float = 300.0) -> ReferenceServer:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.process.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"llama-server not ready after {timeout}s:\n{self.log()}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=kwargs.pop("timeout", 120), **kwargs)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self._log.close()
