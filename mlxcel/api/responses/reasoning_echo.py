"""The reasoning echo: the reasoning of each generated assistant turn, remembered so
that a client replaying the turn without its reasoning item gets it rendered as it
was generated (and the prompt cache keeps matching). Bounded by
MLXCEL_REASONING_ECHO_MAX_BYTES; 0 turns it off. Kept in this process's memory: it
only helps the prompt cache, which is this process's too."""

from __future__ import annotations

import hashlib
import json

from mlxcel.api.responses.input_items import items_to_messages
from mlxcel.state.memory_backend import MemoryStore
from mlxcel.state.store import UNBOUNDED


def turn_key(message: dict) -> str:
    """An assistant turn by what it says and calls, without its reasoning."""
    calls = [(c.get("id"), c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls", [])]
    raw = json.dumps([message.get("content") or "", calls], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


class ReasoningEcho:
    def __init__(self, max_bytes: int, enabled: bool = True) -> None:
        entries = UNBOUNDED if enabled and max_bytes > 0 else 0
        self._store = MemoryStore("reasoning_echo", entries, max_bytes, 0)

    @property
    def enabled(self) -> bool:
        return self._store.enabled

    def remember(self, output: list[dict]) -> None:
        """Remember the reasoning of the assistant turns of a response's output."""
        if not self.enabled or not any(item.get("type") == "reasoning" for item in output):
            return
        turns = [item for item in output if item.get("type") != "compaction"]
        for message in items_to_messages(turns, "output"):
            reasoning = message.get("reasoning_content")
            if message["role"] == "assistant" and reasoning:
                self._store.put(turn_key(message), reasoning, len(reasoning.encode("utf-8")))

    def lookup(self, message: dict) -> str | None:
        return self._store.get(turn_key(message)) if self.enabled else None
