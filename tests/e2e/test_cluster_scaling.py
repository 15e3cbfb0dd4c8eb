"""Replicas scaled by queue depth: `--min-replicas 1 --max-replicas 2` starts one
replica; requests queued beyond its slots bring the second."""

from __future__ import annotations

import concurrent.futures
import signal
import socket
import subprocess
import time

import pytest

from tests.cluster_process import ClusterProcess

pytestmark = pytest.mark.slow


def test_a_queue_beyond_the_slots_adds_a_replica():
    server = ClusterProcess("--min-replicas", "1", "--max-replicas", "2", "-t", "1", "-np", "1", "-c", "1024")
    try:
        server.wait_ready(replicas=1)
        assert len(server.ready_replicas()) == 1

        def long_request(i: int) -> int:
            with server.client(timeout=300) as client:
                return client.post("/v1/completions", json={"prompt": f"Story {i}:", "max_tokens": 400,
                                                            "ignore_eos": True}).status_code

        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            pending = [pool.submit(long_request, i) for i in range(6)]
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and len(server.ready_replicas()) < 2:
                time.sleep(1)
            scaled = len(server.ready_replicas())
            assert all(p.result() == 200 for p in pending)
        assert scaled == 2
    finally:
        server.stop()


def test_replicas_that_cannot_load_stop_the_start_with_their_reason(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(4092))
    server = ClusterProcess("--replicas", "2", "-t", "1", model=str(broken))
    try:
        assert server.process.wait(240) == 1
        errors = [line for line in server.log().splitlines() if line.startswith("mlxcel: error:")]
        assert len(errors) == 1 and "could not load the model" in errors[0], server.log()[-2000:]
    finally:
        server.stop()


def test_an_endpoint_in_use_stops_the_start_before_ray():
    """The gateway's port taken by another process: one line naming the address, and no
    Ray instance started for it (nothing to wait for)."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        server = ClusterProcess("--replicas", "2", "-t", "1", port=taken.getsockname()[1])
        try:
            started = time.monotonic()
            assert server.process.wait(60) == 1
            assert time.monotonic() - started < 30  # before any Ray start-up
            errors = [line for line in server.log().splitlines() if line.startswith("mlxcel: error:")]
            expected = f"mlxcel: error: cannot listen on 127.0.0.1 port {taken.getsockname()[1]}: Address already in use"
            assert errors == [expected], server.log()[-2000:]
            assert "Started a local Ray instance" not in server.log()
        finally:
            server.stop()
    finally:
        taken.close()


def _session_processes(sid: int) -> list[str]:
    rows = subprocess.run(["ps", "-ww", "-eo", "sid=,args="], capture_output=True, text=True, check=False).stdout.splitlines()
    return [row.split(None, 1)[1] for row in rows if row.split() and row.split()[0] == str(sid)]


@pytest.mark.parametrize("phase", ["ray starting", "replicas loading"])
def test_sigterm_while_starting_stops_cleanly(phase):
    """SIGTERM while Ray starts (its GCS is up, the driver still in ray.init) or while the
    replicas load: the server stops at once with no traceback, and no Ray process of
    this server's is left behind."""
    server = ClusterProcess("--replicas", "2", "-t", "1", "-np", "1", "-c", "1024")
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and server.process.poll() is None:
            if phase == "ray starting" and any("gcs_server" in p for p in _session_processes(server.process.pid)):
                break
            if phase == "replicas loading" and "Started Serve" in server.log():
                break
            time.sleep(0.05)
        server.process.send_signal(signal.SIGTERM)
        # 0: the start had just finished, a plain stop; -2: about one run in 14 stopped during
        # the replicas' deploy ends by SIGINT inside Ray's shutdown (after our "stopped while
        # starting"), with nothing left behind all the same
        assert server.process.wait(60) in (130, 0, -2), server.log()[-3000:]
        assert "Traceback" not in server.log(), server.log()[-3000:]
        deadline = time.monotonic() + 30
        while _session_processes(server.process.pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _session_processes(server.process.pid) == []
    finally:
        server.stop()
