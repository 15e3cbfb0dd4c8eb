"""Which server processes sharing a store are alive: each holds a lease, an entry in
the `instances` store that a thread renews every few seconds and that expires soon
after its process stops. A process on this machine (same host, boot and PID
namespace) is also known dead at once when its PID is gone, so a server restarted
right after a crash need not wait for the old lease to run out."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from mlxcel.state.store import UNBOUNDED, StateBackend, StateUnavailable

LEASE_SECS = 15.0
RENEW_SECS = 3.0
log = logging.getLogger("mlxcel.state")


def machine_id() -> str:
    """Host name, boot and PID namespace: two processes with equal ids can see each other's PIDs."""
    parts = [socket.gethostname()]
    for read in (lambda: Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
                 lambda: os.readlink("/proc/self/ns/pid")):
        try:
            parts.append(read())
        except OSError:
            parts.append("?")
    return "|".join(parts)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (killed, not yet reaped) is gone too
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True


class InstanceLease:
    def __init__(self, backend: StateBackend, lease_secs: float = LEASE_SECS, renew_secs: float = RENEW_SECS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.id = uuid.uuid4().hex
        self.machine = machine_id()
        self.renew_secs = renew_secs
        self._clock = clock
        self._store = backend.store("instances", UNBOUNDED, UNBOUNDED, lease_secs)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # when a lapsed lease means its server is gone again (None: ours cannot be renewed now)
        self._trusted_from: float | None = 0.0

    def renew(self) -> None:
        try:
            self._store.put(self.id, {"pid": os.getpid(), "machine": self.machine}, 1)
        except StateUnavailable:
            self._trusted_from = None
            raise
        if self._trusted_from is None:  # back: the other servers renew theirs within two periods
            self._trusted_from = self._clock() + 2 * self.renew_secs

    def alive(self, instance_id: str) -> bool:
        """Whether the server holding `instance_id` runs. A store that was unreachable
        longer than a lease let every lease lapse: until the others had time to renew
        theirs, a lapsed lease is not taken for a gone server (its jobs are not failed
        while it still runs them)."""
        if instance_id == self.id:
            return True
        record = self._store.peek(instance_id)
        if record is None:
            return self._trusted_from is None or self._clock() < self._trusted_from
        return record["machine"] != self.machine or pid_alive(record["pid"])

    def start(self) -> None:
        self.renew()
        self._thread = threading.Thread(target=self._renew_forever, name="mlxcel-state-lease", daemon=True)
        self._thread.start()

    def _renew_forever(self) -> None:
        while not self._stop.wait(self.renew_secs):
            try:
                self.renew()
            except StateUnavailable as exc:  # down a while: the lease retries
                log.warning("renewing this server's lease failed: %s", exc)
            except Exception:  # noqa: BLE001
                log.exception("renewing this server's lease in the state store failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._store.pop(self.id)
