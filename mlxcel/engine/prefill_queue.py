"""Requests waiting for a slot, ordered by priority, first come first served within a level."""

from __future__ import annotations

import heapq
import itertools

from mlxcel.engine.request import GenerationRequest


class PrefillQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, GenerationRequest]] = []
        self._arrival = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, request: GenerationRequest) -> None:
        heapq.heappush(self._heap, (int(request.priority), next(self._arrival), request))

    def pop(self) -> GenerationRequest:
        return heapq.heappop(self._heap)[2]

    def pop_for(self, idle_slots: set[int]) -> GenerationRequest | None:
        """The first request, in queue order, that one of the idle slots can take: a
        request pinned to a busy slot (llama-server's id_slot) waits without holding
        up those behind it."""
        head = self._heap[0][2] if self._heap else None
        if head is not None and (head.id_slot < 0 or head.id_slot in idle_slots):
            return self.pop()
        for entry in sorted(self._heap):
            request = entry[2]
            if request.id_slot < 0 or request.id_slot in idle_slots:
                return self.remove(request.id)
        return None

    def remove(self, request_id: int) -> GenerationRequest | None:
        for i, (_, _, request) in enumerate(self._heap):
            if request.id == request_id:
                self._heap.pop(i)
                heapq.heapify(self._heap)
                return request
        return None

    def ordered(self) -> list[GenerationRequest]:
        """The waiting requests in the order they would be served (pinned ones aside)."""
        return [entry[2] for entry in sorted(self._heap)]

    def drain(self) -> list[GenerationRequest]:
        requests = [entry[2] for entry in sorted(self._heap)]
        self._heap.clear()
        return requests
