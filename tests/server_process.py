"""Starting a real mlxcel server in a subprocess for end-to-end tests."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

DEFAULT_MODEL = "smollm2-135m-instruct"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(process: subprocess.Popen, timeout: float = 10) -> None:
    """SIGTERM, then SIGKILL after `timeout` seconds."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class ServerProcess:
    _state_dir: str | None = None  # a temporary store of this server's own, removed on stop
    def __init__(self, *args: str, model: str | None = DEFAULT_MODEL, env: dict | None = None) -> None:
        """`model=None` passes no -m (a server started with --config). Without a
        --state-url (or MLXCEL_STATE_URL), the server gets a state store of its own,
        removed on stop, so tests do not see each other's stored responses."""
        self.port = free_port()
        self._state_dir = None
        env = dict(env or {})
        if "--state-url" not in args and "MLXCEL_STATE_URL" not in env:
            self._state_dir = tempfile.mkdtemp(prefix="mlxcel-test-state-")
            env["MLXCEL_STATE_URL"] = f"sqlite://{self._state_dir}/state.sqlite3"
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"mlxcel-test-{self.port}.log"
        chosen = ["-m", model] if model is not None else []
        command = [sys.executable, "-m", "mlxcel", "serve", *chosen, "--port", str(self.port), "-t", "2", *args]
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, **env}
        )

    def wait_ready(self, timeout: float = 300.0, health_path: str = "/health") -> ServerProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.base_url}{health_path}", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"server not ready after {timeout}s:\n{self.log()}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=kwargs.pop("timeout", 120), **kwargs)

    def stop(self) -> None:
        stop_process(self.process)
        self._log.close()
        if self._state_dir is not None:
            shutil.rmtree(self._state_dir, ignore_errors=True)


def process_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
