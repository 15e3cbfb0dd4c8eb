"""The chat completions running now, by the id their chunks carry, for llama-server's
POST /v1/chat/completions/control: which engine runs each one's requests, and whether
the request armed reasoning control. Read and written on the event loop only."""

from __future__ import annotations

from dataclasses import dataclass

from mlxcel.engine.engine import Engine


@dataclass(frozen=True)
class LiveCompletion:
    engine: Engine
    request_ids: tuple[int, ...]  # one per choice
    reasoning_control: bool


class LiveCompletions:
    def __init__(self) -> None:
        self._running: dict[str, LiveCompletion] = {}

    def add(self, completion_id: str, completion: LiveCompletion) -> None:
        self._running[completion_id] = completion

    def remove(self, completion_id: str) -> None:
        self._running.pop(completion_id, None)

    def get(self, completion_id: str) -> LiveCompletion | None:
        return self._running.get(completion_id)

    def __len__(self) -> int:
        return len(self._running)
