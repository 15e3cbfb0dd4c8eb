"""Counters the engine thread keeps for /health, /slots and /metrics (the spec's
`mlxcel_*` series and llama-server's `llamacpp:*` ones)."""

from __future__ import annotations

from dataclasses import dataclass

RECENT_REQUESTS = 8  # finished requests whose timings are kept (the recent rate means)


@dataclass(frozen=True)
class RequestTiming:
    """One finished request that generated: its prefill (prompt tokens it decoded,
    seconds from admission to the first token) and its decode (tokens generated,
    seconds from the first token to the last)."""

    prompt_tokens: int
    prefill_tokens: int
    prefill_seconds: float
    generated: int
    decode_seconds: float


@dataclass
class EngineStats:
    sequences_started: int = 0
    sequences_completed: int = 0
    prefill_tokens: int = 0  # prompt tokens decoded (cached ones are not)
    decode_tokens: int = 0
    decode_steps: int = 0
    prefill_chunks: int = 0
    requests_completed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    generation_seconds: float = 0.0
    rejected_queue_full: int = 0
    # llama-server's metrics
    prompt_tokens_cached: int = 0  # prompt tokens a slot reused instead of decoding
    prompt_seconds: float = 0.0  # time of the batches that carried prompt tokens
    predicted_tokens: int = 0  # tokens generated, by every request that generated any
    predicted_steps: int = 0  # the same less each request's first token (it costs no decode)
    predicted_seconds: float = 0.0  # from each request's first token to its last
    n_decode: int = 0  # llama_decode calls that succeeded
    n_busy_slots: int = 0  # busy slots, summed over those calls
    n_tokens_max: int = 0  # longest sequence a slot held (prompt + generation)
    draft_tokens: int = 0
    draft_accepted: int = 0
    draft_rounds: int = 0
    traffic_draft_tokens: int = 0  # of draft_tokens, those copied from earlier requests' outputs
    traffic_draft_accepted: int = 0
    lookup_cache_draft_tokens: int = 0  # of draft_tokens, those from the lookup caches (-lcs, -lcd)
    lookup_cache_draft_accepted: int = 0
    context_shifts: int = 0
    # how each request's time to first token splits, summed over requests that reached it
    first_tokens: int = 0
    first_token_wait_seconds: float = 0.0  # waiting for a slot
    first_token_restore_seconds: float = 0.0  # admission: saving, copying or restoring a cached prefix
    first_token_prefill_seconds: float = 0.0  # from admission to the first token
    first_token_prefill_tokens: int = 0  # prompt tokens decoded for them (the rest came from a cache)
    # where the engine thread's time goes, summed over steps (seconds): planning the batch
    # (admission is outside steps; drafting is in it), writing it, llama_decode, sampling
    # (reading logits included: it waits for the decode's last work), and handing events
    # to the HTTP side
    steps: int = 0
    step_schedule_seconds: float = 0.0
    step_fill_seconds: float = 0.0
    step_decode_seconds: float = 0.0
    step_sample_seconds: float = 0.0
    step_emit_seconds: float = 0.0
    # the last RECENT_REQUESTS finished requests, oldest first (a tuple replaced whole:
    # published copies share it safely)
    recent: tuple[RequestTiming, ...] = ()

    def record_request(self, timing: RequestTiming) -> None:
        self.recent = (*self.recent[-(RECENT_REQUESTS - 1):], timing)

    def count_decode(self, n_busy: int, longest: int, n_prompt: int, seconds: float) -> None:
        self.n_decode += 1
        self.n_busy_slots += n_busy
        self.n_tokens_max = max(self.n_tokens_max, longest)
        if n_prompt:
            self.prefill_tokens += n_prompt
            self.prompt_seconds += seconds

    def count_first_token(self, wait: float, restore: float, prefill: float, n_prefilled: int) -> None:
        self.first_tokens += 1
        self.first_token_wait_seconds += wait
        self.first_token_restore_seconds += restore
        self.first_token_prefill_seconds += prefill
        self.first_token_prefill_tokens += n_prefilled

    def count_prediction(self, n_generated: int, seconds: float, drafted: int, accepted: int, rounds: int) -> None:
        if n_generated <= 0:
            return
        self.predicted_tokens += n_generated
        self.predicted_steps += n_generated - 1
        self.predicted_seconds += seconds
        self.draft_tokens += drafted
        self.draft_accepted += accepted
        self.draft_rounds += rounds
