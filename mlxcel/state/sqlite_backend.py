"""Stores in one SQLite file (WAL mode), shared safely by every process on the host
that opens it: each change is one short IMMEDIATE transaction, a busy timeout waits
out another process's, and one connection per backend is guarded by a lock.

One table holds every store's entries; triggers keep each store's entry count and
byte total, so the budgets are checked without scanning. `used` orders entries by
last use (a counter per store); `expires_at` is wall-clock seconds."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from mlxcel.state.store import BoundedStore, StateBackend, StateUnavailable, encode

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    store TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, size INTEGER NOT NULL,
    expires_at REAL, used INTEGER NOT NULL, PRIMARY KEY (store, key)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entries_by_use ON entries (store, used);
CREATE INDEX IF NOT EXISTS entries_by_expiry ON entries (store, expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS totals (store TEXT PRIMARY KEY, entries INTEGER NOT NULL, bytes INTEGER NOT NULL);
CREATE TRIGGER IF NOT EXISTS entries_added AFTER INSERT ON entries BEGIN
    INSERT INTO totals VALUES (new.store, 1, new.size)
    ON CONFLICT (store) DO UPDATE SET entries = entries + 1, bytes = bytes + new.size;
END;
CREATE TRIGGER IF NOT EXISTS entries_removed AFTER DELETE ON entries BEGIN
    UPDATE totals SET entries = entries - 1, bytes = bytes - old.size WHERE store = old.store;
END;
"""
BUSY_TIMEOUT_MS = 30_000


class SqliteBackend(StateBackend):
    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.description = f"sqlite {self.path}"
        self.clock = clock
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                   check_same_thread=False)
        self._lock = threading.RLock()
        self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        self._retry_busy(lambda: self._db.execute("PRAGMA journal_mode = WAL"))
        self._db.execute("PRAGMA synchronous = NORMAL")
        with self._lock:
            self._retry_busy(lambda: self._db.executescript(f"BEGIN IMMEDIATE;\n{SCHEMA}\nCOMMIT;"))

    def _retry_busy(self, step: Callable[[], object]) -> None:
        """Run `step`, again while another process holds the file: switching to WAL can
        answer "database is locked" at once, without the busy timeout (several
        replicas opening a new file together)."""
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                step()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                time.sleep(0.02)

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: other processes wait (busy timeout) until it commits."""
        with self._lock, self._failing_as_unavailable():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:  # a failed COMMIT (a full disk) leaves it open
                    with suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                raise

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._failing_as_unavailable():
            yield self._db

    @contextmanager
    def _failing_as_unavailable(self) -> Iterator[None]:
        """The file locked past the busy timeout, a full disk, a file made read-only:
        StateUnavailable, as for any backend."""
        try:
            yield
        except sqlite3.Error as exc:
            raise StateUnavailable(f"the state store ({self.description}) failed: {type(exc).__name__}: "
                                   f"{exc}") from None

    def store(self, name: str, max_entries: int, max_bytes: int, ttl_secs: float) -> SqliteStore:
        return SqliteStore(self, name, max_entries, max_bytes, ttl_secs)

    def close(self) -> None:
        with self._lock:
            self._db.close()


class SqliteStore(BoundedStore):
    def __init__(self, backend: SqliteBackend, name: str, max_entries: int, max_bytes: int, ttl_secs: float) -> None:
        super().__init__(name, max_entries, max_bytes, ttl_secs)
        self._backend = backend

    def put(self, key: str, value: Any, size: int, ttl_secs: float | None = None) -> bool:
        if not self._accepts(size):
            return False
        text = encode(value)
        with self._backend.write() as db:
            return self._put(db, key, text, size, self._ttl(ttl_secs))

    def update(self, key: str, change: Callable[[Any | None], tuple[Any, int] | None]) -> bool:
        with self._backend.write() as db:  # other processes wait until it commits
            text = self._live(db, key)
            new = change(None if text is None else json.loads(text))
            if new is None or not self._accepts(new[1]):
                return False
            return self._put(db, key, encode(new[0]), new[1], self.ttl_secs)

    def get(self, key: str) -> Any | None:
        with self._backend.write() as db:
            text = self._live(db, key)
            if text is not None:
                db.execute("UPDATE entries SET used = ? WHERE store = ? AND key = ?",
                           (self._next_use(db), self.name, key))
        return None if text is None else json.loads(text)

    def peek(self, key: str) -> Any | None:
        with self._backend.read() as db:
            row = db.execute("SELECT value, expires_at FROM entries WHERE store = ? AND key = ?",
                             (self.name, key)).fetchone()
        if row is None:
            return None
        if row[1] is not None and row[1] <= self._backend.clock():
            with self._backend.write() as db:
                self._live(db, key)  # drops it
            return None
        return json.loads(row[0])

    def pop(self, key: str) -> Any | None:
        with self._backend.write() as db:
            row = db.execute("DELETE FROM entries WHERE store = ? AND key = ? RETURNING value",
                             (self.name, key)).fetchone()
        return None if row is None else json.loads(row[0])

    def keys(self) -> list[str]:
        with self._backend.write() as db:
            self._expire(db, self._backend.clock())
            return [row[0] for row in db.execute("SELECT key FROM entries WHERE store = ? ORDER BY used",
                                                 (self.name,))]

    def __len__(self) -> int:
        with self._backend.write() as db:
            self._expire(db, self._backend.clock())
            return self._totals(db)[0]

    @property
    def bytes(self) -> int:
        with self._backend.read() as db:
            return self._totals(db)[1]

    # -- inside a transaction --------------------------------------------------------

    def _put(self, db: sqlite3.Connection, key: str, text: str, size: int, ttl: float) -> bool:
        now = self._backend.clock()
        db.execute("DELETE FROM entries WHERE store = ? AND key = ?", (self.name, key))
        db.execute("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)",
                   (self.name, key, text, size, now + ttl if ttl > 0 else None, self._next_use(db)))
        self._expire(db, now)
        self._evict(db)
        return self._has(db, key)

    def _totals(self, db: sqlite3.Connection) -> tuple[int, int]:
        row = db.execute("SELECT entries, bytes FROM totals WHERE store = ?", (self.name,)).fetchone()
        return (0, 0) if row is None else (row[0], row[1])

    def _next_use(self, db: sqlite3.Connection) -> int:
        return db.execute("SELECT COALESCE(MAX(used), 0) + 1 FROM entries WHERE store = ?",
                          (self.name,)).fetchone()[0]

    def _has(self, db: sqlite3.Connection, key: str) -> bool:
        return db.execute("SELECT 1 FROM entries WHERE store = ? AND key = ?", (self.name, key)).fetchone() is not None

    def _live(self, db: sqlite3.Connection, key: str) -> str | None:
        row = db.execute("SELECT value, expires_at FROM entries WHERE store = ? AND key = ?",
                         (self.name, key)).fetchone()
        if row is not None and row[1] is not None and row[1] <= self._backend.clock():
            db.execute("DELETE FROM entries WHERE store = ? AND key = ?", (self.name, key))
            return None
        return None if row is None else row[0]

    def _expire(self, db: sqlite3.Connection, now: float) -> None:
        db.execute("DELETE FROM entries WHERE store = ? AND expires_at IS NOT NULL AND expires_at <= ?",
                   (self.name, now))

    def _evict(self, db: sqlite3.Connection) -> None:
        while True:
            count, size = self._totals(db)
            if count == 0 or (count <= self.max_entries and size <= self.max_bytes):
                return
            db.execute("DELETE FROM entries WHERE store = ? AND key = (SELECT key FROM entries WHERE store = ? "
                       "ORDER BY used LIMIT 1)", (self.name, self.name))
