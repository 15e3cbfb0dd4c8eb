"""A real redis-server for tests, on a free port, keeping nothing on disk (Debian's
redis-server package; `make test` installs it when missing)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from tests.server_process import free_port, stop_process


class RedisServer:
    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: apt-get install redis-server (make test does)")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(directory), "--daemonize", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 20.0) -> RedisServer:
        import redis

        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}")
            try:
                client.ping()
                return self
            except redis.ConnectionError:
                time.sleep(0.05)
            finally:
                client.close()
        raise TimeoutError("redis-server did not answer")

    def stop(self) -> None:
        stop_process(self.process)
