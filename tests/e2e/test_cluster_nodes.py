"""The many-hosts recipe on one machine: a Ray head and a worker node, each started
with `ray start` and offering one CPU, then `mlxcel serve --ray-address HEAD
--replicas 2 -t 1 --api-key K`: the replicas land one on each node and the endpoint
on the head serves through both, keys checked as by one server."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.cluster_process import RAY_ENV, ClusterProcess
from tests.server_process import free_port

pytestmark = pytest.mark.slow
RAY = str(Path(sys.executable).with_name("ray"))


class RayNodes:
    """A head and one worker of our own (never `ray stop`: other Ray instances may run)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.temp_dir = tempfile.mkdtemp(prefix="mlxcel-ray-")
        self.groups: list[int] = []
        common = ["--num-cpus", "1", "--disable-usage-stats"]
        self._start(["start", "--head", "--port", str(self.port), "--include-dashboard", "false",
                     "--temp-dir", self.temp_dir, *common])
        self._start(["start", "--address", f"127.0.0.1:{self.port}", *common])

    def _start(self, args: list[str]) -> None:
        started = subprocess.run([RAY, *args], env={**os.environ, **RAY_ENV}, capture_output=True, text=True,
                                 check=False, timeout=120, start_new_session=True)
        if started.returncode != 0:
            raise RuntimeError(f"ray {' '.join(args)} failed:\n{started.stdout}\n{started.stderr}")
        self.groups.append(self._group_of_children())

    def _group_of_children(self) -> int:
        found = subprocess.run(["pgrep", "-f", f"--gcs-address=[0-9.]+:{self.port}"], capture_output=True,
                               text=True, check=False).stdout.split()
        return os.getpgid(int(found[-1])) if found else 0

    def stop(self) -> None:
        pids = subprocess.run(["pgrep", "-f", f"{self.temp_dir}|[0-9.]+:{self.port}"], capture_output=True,
                              text=True, check=False).stdout.split()
        for group in set(self.groups) - {0, os.getpgid(0)}:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def test_replicas_on_two_nodes_behind_the_head():
    nodes = RayNodes()
    server = None
    try:
        server = ClusterProcess("--replicas", "2", "-t", "1", "-np", "2", "-c", "2048", "--api-key", "k-secret",
                                "--ray-address", f"127.0.0.1:{nodes.port}")
        server.wait_ready(replicas=2)
        # the router places requests by the replicas' last routing reports (every few
        # seconds): one made while a replica still loaded keeps it out until the next
        deadline = time.monotonic() + 60
        while not (len(replicas := server.ready_replicas()) == 2
                   and all(info.get("ready") for info in replicas.values())):
            assert time.monotonic() < deadline, replicas
            time.sleep(0.3)
        assert len({info["node"] for info in replicas.values()}) == 2, replicas
        served = set()
        with server.client() as anonymous:
            refused = anonymous.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
            assert refused.status_code == 401 and refused.json()["error"]["type"] == "missing_api_key"
        with server.client(headers={"Authorization": "Bearer k-secret"}) as client:
            for i in range(6):  # unrelated prompts (no shared prefix): placed by load, so both replicas serve
                answer = client.post("/v1/chat/completions", json={
                    "messages": [{"role": "system", "content": f"{i}: you count."},
                                 {"role": "user", "content": "Say a number."}], "max_tokens": 4})
                assert answer.status_code == 200, answer.text
                served.add(answer.headers["x-mlxcel-replica"])
        assert len(served) == 2, served
    finally:
        if server is not None:
            server.stop()
        nodes.stop()
