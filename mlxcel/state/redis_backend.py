"""Stores in Redis, shared by every replica that points at the same server and
database. Each operation is one Lua script, so a put and the evictions it causes
are atomic across processes.

A store `s` of namespace `ns` keeps, under `ns:s:`: `v:<key>` the JSON value (a
Redis TTL slightly past the entry's own, so Redis frees what nobody reads), `lru` a
sorted set of keys by last use (a counter, `tick`), `exp` a sorted set of keys by
expiry time, `size` a hash of entry sizes and `bytes` their sum. Expiry times are
the caller's wall clock, passed to every script."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import redis

from mlxcel.state.store import BoundedStore, StateBackend, StateUnavailable, encode

REDIS_TTL_SLACK_MS = 5_000

_PRELUDE = """
local P = ARGV[1]
local now = tonumber(ARGV[2])
local function drop(k)
  local s = redis.call('HGET', P .. 'size', k)
  redis.call('DEL', P .. 'v:' .. k)
  if not s then return end
  redis.call('HDEL', P .. 'size', k)
  redis.call('ZREM', P .. 'lru', k)
  redis.call('ZREM', P .. 'exp', k)
  redis.call('DECRBY', P .. 'bytes', s)
end
local function expire()
  for _, k in ipairs(redis.call('ZRANGEBYSCORE', P .. 'exp', '-inf', now)) do drop(k) end
end
local function live(k)
  if not redis.call('HGET', P .. 'size', k) then return nil end
  local e = redis.call('ZSCORE', P .. 'exp', k)
  local v = redis.call('GET', P .. 'v:' .. k)
  if (e and tonumber(e) <= now) or not v then drop(k) return nil end
  return v
end
local function touch(k)
  redis.call('ZADD', P .. 'lru', redis.call('INCR', P .. 'tick'), k)
end
"""

_SCRIPTS = {
    # ARGV: prefix, now, key, value, size, ttl, max entries, max bytes
    "put": """
local k, size, ttl = ARGV[3], tonumber(ARGV[5]), tonumber(ARGV[6])
local max_entries, max_bytes = tonumber(ARGV[7]), tonumber(ARGV[8])
drop(k)
redis.call('SET', P .. 'v:' .. k, ARGV[4])
if ttl > 0 then
  redis.call('ZADD', P .. 'exp', now + ttl, k)
  redis.call('PEXPIRE', P .. 'v:' .. k, math.floor(ttl * 1000) + tonumber(ARGV[9]))
end
redis.call('HSET', P .. 'size', k, size)
redis.call('INCRBY', P .. 'bytes', size)
touch(k)
expire()
while true do
  local n = redis.call('ZCARD', P .. 'lru')
  local b = tonumber(redis.call('GET', P .. 'bytes') or '0')
  if n == 0 or (n <= max_entries and b <= max_bytes) then break end
  drop(redis.call('ZRANGE', P .. 'lru', 0, 0)[1])
end
return redis.call('HEXISTS', P .. 'size', k)
""",
    "get": "local v = live(ARGV[3]) if v then touch(ARGV[3]) end return v",
    "peek": "return live(ARGV[3])",
    "pop": "local v = redis.call('GET', P .. 'v:' .. ARGV[3]) drop(ARGV[3]) return v",
    "keys": "expire() return redis.call('ZRANGE', P .. 'lru', 0, -1)",
}


class RedisBackend(StateBackend):
    def __init__(self, client, description: str, namespace: str = "mlxcel",
                 clock: Callable[[], float] = time.time) -> None:
        """`client`: a redis.Redis with decode_responses=True."""
        self.client = client
        self.description = description
        self.namespace = namespace
        self.clock = clock
        self.scripts = {name: client.register_script(_PRELUDE + body) for name, body in _SCRIPTS.items()}

    def store(self, name: str, max_entries: int, max_bytes: int, ttl_secs: float) -> RedisStore:
        return RedisStore(self, name, max_entries, max_bytes, ttl_secs)

    def unavailable(self, exc: Exception) -> StateUnavailable:
        return StateUnavailable(f"the state store ({self.description}) failed: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        self.client.close()


class RedisStore(BoundedStore):
    def __init__(self, backend: RedisBackend, name: str, max_entries: int, max_bytes: int, ttl_secs: float) -> None:
        super().__init__(name, max_entries, max_bytes, ttl_secs)
        self._backend = backend
        self._prefix = f"{backend.namespace}:{name}:"

    def _call(self, script: str, *args: Any) -> Any:
        try:
            return self._backend.scripts[script](args=[self._prefix, repr(self._backend.clock()), *args])
        except redis.RedisError as exc:
            raise self._backend.unavailable(exc) from None

    def put(self, key: str, value: Any, size: int, ttl_secs: float | None = None) -> bool:
        if not self._accepts(size):
            return False
        return bool(self._call("put", key, encode(value), size, repr(float(self._ttl(ttl_secs))),
                               self.max_entries, self.max_bytes, REDIS_TTL_SLACK_MS))

    def update(self, key: str, change: Callable[[Any | None], tuple[Any, int] | None]) -> bool:
        """Optimistic: the entry's value key is watched from the read to the write, and a
        write of another process between them makes the whole update start again."""
        scripts, now = self._backend.scripts, repr(self._backend.clock())
        try:
            with self._backend.client.pipeline() as pipe:
                while True:
                    try:
                        pipe.watch(f"{self._prefix}v:{key}")
                        new = change(_decoded(scripts["peek"](args=[self._prefix, now, key], client=pipe)))
                        if new is None or not self._accepts(new[1]):
                            return False
                        pipe.multi()
                        scripts["put"](args=[self._prefix, now, key, encode(new[0]), new[1],
                                             repr(float(self.ttl_secs)), self.max_entries, self.max_bytes,
                                             REDIS_TTL_SLACK_MS], client=pipe)
                        return bool(pipe.execute()[-1])
                    except redis.WatchError:
                        continue
        except redis.RedisError as exc:
            raise self._backend.unavailable(exc) from None

    def get(self, key: str) -> Any | None:
        return _decoded(self._call("get", key))

    def peek(self, key: str) -> Any | None:
        return _decoded(self._call("peek", key))

    def pop(self, key: str) -> Any | None:
        return _decoded(self._call("pop", key))

    def keys(self) -> list[str]:
        return list(self._call("keys"))

    @property
    def bytes(self) -> int:
        try:
            return int(self._backend.client.get(self._prefix + "bytes") or 0)
        except redis.RedisError as exc:
            raise self._backend.unavailable(exc) from None


def _decoded(text: str | None) -> Any | None:
    return None if text is None else json.loads(text)
