"""An mlxcel server with replicas on Ray Serve (`--replicas`), for end-to-end tests:
its own process group, so whatever Ray started with it goes when it stops."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.server_process import DEFAULT_MODEL, ServerProcess, free_port

RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "RAY_DEDUP_LOGS": "0"}


class ClusterProcess(ServerProcess):
    def __init__(self, *args: str, model: str = DEFAULT_MODEL, env: dict | None = None,
                 port: int | None = None) -> None:
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        env = dict(env or {})
        self._state_dir = None
        if "--state-url" not in args:  # a store of its own, shared by its replicas, removed on stop
            self._state_dir = tempfile.mkdtemp(prefix="mlxcel-test-state-")
            env["MLXCEL_STATE_URL"] = f"sqlite://{self._state_dir}/state.sqlite3"

        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"mlxcel-cluster-{self.port}.log"
        self._log = open(self.log_path, "wb")
        command = [sys.executable, "-m", "mlxcel", "serve", "-m", model, "--port", str(self.port), *args]
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT,
                                        env={**os.environ, **RAY_ENV, **env}, start_new_session=True)

    def wait_ready(self, timeout: float = 300.0, replicas: int = 1) -> ClusterProcess:
        """Ready when /health?ready=1 answers 200 with `replicas` replicas ready."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log()}")
            if len(self.ready_replicas()) >= replicas:
                return self
            time.sleep(0.3)
        raise TimeoutError(f"{replicas} replicas not ready after {timeout}s:\n{self.log()}")

    def ready_replicas(self) -> dict[str, dict]:
        try:
            answer = httpx.get(f"{self.base_url}/health?ready=1", timeout=15)
        except httpx.HTTPError:
            return {}
        if answer.status_code != 200:
            return {}
        # ready, and known to the router by its first report (its pid, node and load)
        return {r: info for r, info in answer.json().get("replicas", {}).items()
                if info.get("status") == 200 and info.get("pid")}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                pass
        try:  # Ray's own processes, should any outlive the server
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        self._log.close()
        if self._state_dir is not None:
            shutil.rmtree(self._state_dir, ignore_errors=True)
