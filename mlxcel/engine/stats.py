"""Counters the engine thread keeps for /health, /slots and /metrics."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EngineStats:
    sequences_started: int = 0
    sequences_completed: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    decode_steps: int = 0
    prefill_chunks: int = 0
    requests_completed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    generation_seconds: float = 0.0
    rejected_queue_full: int = 0
    context_shifts: int = 0
