"""Start, health-check and stop the model servers under test (loopback only)."""
from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from reference import ensure_llama_server  # bench/: the directory of every script that imports this

from mlxcel.engine.weight_buffers import reference_repack_flags

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = Path.home() / ".cache/mlxcel/models/SmolLM2-135M-Instruct.Q4_1.gguf"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def supports_flag(binary: str, flag: str, timeout: float = 60) -> bool:
    """True if `binary --help` mentions `flag` (e.g. --no-webui)."""
    try:
        out = subprocess.run([binary, "--help"], capture_output=True, text=True,
                             timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return flag in out.stdout + out.stderr


def llama_server_argv(binary: str, args: list[str]) -> list[str]:
    """llama-server's command line with `args`, its web UI off where the build has one."""
    return [binary, *args] + (["--no-webui"] if supports_flag(binary, "--no-webui") else [])


def add_pair_arguments(ap: argparse.ArgumentParser, mlxcel_cmd: str) -> None:
    """The flags of a script that runs mlxcel and llama-server side by side."""
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--threads", "-t", type=int, default=2)
    ap.add_argument("--mlxcel-cmd", default=mlxcel_cmd)
    ap.add_argument("--log-dir", type=Path, default=ROOT / "bench/results/logs")
    ap.add_argument("--json", type=Path)


def pair_commands(mlxcel_cmd: str, common: list[str]) -> dict[str, list[str]]:
    """{name: command line} of mlxcel (`mlxcel_cmd`) and the reference llama-server,
    each with `common` flags."""
    return {"mlxcel": [*shlex.split(mlxcel_cmd), *common],
            "llama-server": llama_server_argv(str(ensure_llama_server()), common)}


@dataclass
class Server:
    name: str
    argv: list[str]           # full command line, the port included
    port: int
    log_path: Path
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if Path(self.argv[0]).name == "llama-server" and not {"--repack", "--no-repack", "-nr"} & set(self.argv):
            # hold the weights as mlxcel does by default on this CPU (weight_buffers.py)
            self.argv = [*self.argv, *reference_repack_flags()]
        log = open(self.log_path, "wb")
        # Own process group, so that Ctrl-C in the terminal reaches only us and
        # stop() can take down anything the server spawned.
        self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()

    def wait_healthy(self, timeout: float = 300) -> None:
        """Poll GET /health until 200 (503 means still loading)."""
        deadline = time.monotonic() + timeout
        with httpx.Client(trust_env=False, timeout=5) as client:
            while time.monotonic() < deadline:
                if self.proc is None or self.proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited during startup "
                                       f"(rc={self.proc and self.proc.returncode})\n"
                                       f"{self.log_tail()}")
                try:
                    if client.get(f"{self.url}/health").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.5)
        raise TimeoutError(f"{self.name} not healthy after {timeout:.0f}s\n{self.log_tail()}")

    def peak_rss_mib(self) -> float | None:
        """VmHWM of the server's main process (Linux only)."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return None

    def log_tail(self, n: int = 20) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(f"  | {line}" for line in lines[-n:])

    def stop(self, grace: float = 10) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue


@contextlib.contextmanager
def running(servers: list[Server], startup_timeout: float = 600,
            log: Callable[[str], None] = print) -> Iterator[dict[str, dict]]:
    """Start the servers one at a time (loading is CPU-bound), yield {name: info}
    (argv, startup_s; peak_rss_mib is added on the way out), and stop them all."""
    info: dict[str, dict] = {}
    try:
        for s in servers:
            log(f"starting {s.name}: {shlex.join(s.argv)}")
            t0 = time.monotonic()
            s.start()
            s.wait_healthy(startup_timeout)
            info[s.name] = {"argv": s.argv, "startup_s": time.monotonic() - t0}
            log(f"{s.name} healthy after {info[s.name]['startup_s']:.1f}s (log {s.log_path})")
        yield info
        for s in servers:
            info[s.name]["peak_rss_mib"] = s.peak_rss_mib()
    finally:
        for s in servers:
            s.stop()


def _host_busy_s() -> float:
    """CPU seconds all cores spent busy since boot (/proc/stat: all but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _process_cpu_s(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


class OtherLoad:
    """How busy the cores were with anything but the server under test and this
    client, as a share of all cores, over the watch (Linux; nan elsewhere). The
    machines are shared: a pass with a high share measured someone else too."""

    def __init__(self, server: Server) -> None:
        self.pid = server.proc.pid if server.proc else None
        self._start = self._sample()

    def _sample(self) -> tuple[float, float, float, float] | None:
        try:
            return (time.monotonic(), _host_busy_s(), _process_cpu_s(self.pid), time.process_time())
        except (OSError, ValueError, TypeError, IndexError):
            return None

    def share(self) -> float:
        end = self._sample()
        if self._start is None or end is None or end[0] <= self._start[0]:
            return float("nan")
        wall, host, server, client = (b - a for a, b in zip(self._start, end))
        return max(0.0, host - server - client) / (wall * (os.cpu_count() or 1))


def start_server(name: str, argv: list[str], log_dir: Path) -> Server:
    """Start `argv` (without --host/--port) on a free port, logging to log_dir/NAME.log,
    and wait until /health answers 200."""
    port = free_port()
    server = Server(name, [*argv, "--host", HOST, "--port", str(port)], port, log_dir / f"{name}.log")
    server.start()
    server.wait_healthy()
    return server
