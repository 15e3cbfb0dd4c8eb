"""Typed messages between the HTTP side and the engine thread."""

from __future__ import annotations

import enum
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlxcel.engine.constraints import TokenConstraint
from mlxcel.engine.media_span import MediaLayout
from mlxcel.engine.sampling import SamplingParams


class Priority(enum.IntEnum):
    HIGH = 0
    NORMAL = 1
    LOW = 2

    @classmethod
    def from_header(cls, value: str | None) -> Priority:
        """`X-Priority`: high, normal or low; anything else is normal."""
        return {"high": cls.HIGH, "low": cls.LOW}.get((value or "").strip().lower(), cls.NORMAL)


class FinishReason(str, enum.Enum):
    STOP = "stop"
    LENGTH = "length"
    CANCELLED = "cancelled"
    ERROR = "error"


class Failure(enum.Enum):
    """Why a generation ended in ERROR, where the APIs answer the kinds apart; a finish
    without one is this request's own failure (a 500 naming it)."""

    ENGINE = "engine"  # the engine itself failed (503 engine_failed; the server restarts it)
    STOPPING = "stopping"  # the server stopped while it held the request (503: retry elsewhere)
    UNSATISFIABLE = "unsatisfiable"  # the request's own constraints left no token to sample (400)
    SHED = "shed"  # the memory governor ended it to free memory (503, finish_reason "shed")


@dataclass
class Timings:
    """llama-server's `timings` object for one request."""

    cache_n: int = 0
    prompt_n: int = 0
    prompt_ms: float = 0.0
    predicted_n: int = 0
    predicted_ms: float = 0.0
    draft_n: int = 0
    draft_n_accepted: int = 0
    draft_rounds: int = 0
    draft_kind: str | None = None
    cache_tier: str = "miss"
    wait_ms: float = 0.0  # mlxcel: waiting for a slot (queue), before prompt_ms
    restore_ms: float = 0.0  # mlxcel: admission's copy or restore of the reused prefix, before prompt_ms
    # drafted tokens of the request's predicted output that the output kept, and did not
    # (OpenAI's accepted_prediction_tokens and rejected_prediction_tokens)
    prediction_accepted: int = 0
    prediction_rejected: int = 0

    def to_dict(self) -> dict:
        def per_token(ms: float, n: int) -> float:
            return ms / n if n else 0.0

        def per_second(ms: float, n: int) -> float:
            return 1e3 * n / ms if ms > 0 else 0.0

        return {
            "cache_n": self.cache_n,
            "prompt_n": self.prompt_n,
            "prompt_ms": self.prompt_ms,
            "prompt_per_token_ms": per_token(self.prompt_ms, self.prompt_n),
            "prompt_per_second": per_second(self.prompt_ms, self.prompt_n),
            "predicted_n": self.predicted_n,
            "predicted_ms": self.predicted_ms,
            # as llama-server's: over the decode steps, the first token (from the prompt's
            # logits, at the start of predicted_ms) costing none
            "predicted_per_token_ms": per_token(self.predicted_ms, self.predicted_steps),
            "predicted_per_second": per_second(self.predicted_ms, self.predicted_steps),
            "wait_ms": self.wait_ms,
            "restore_ms": self.restore_ms,
            **self.draft_fields(),
        }

    @property
    def predicted_steps(self) -> int:
        return max(self.predicted_n - 1, 0)

    def draft_fields(self) -> dict:
        """The speculative-decoding counters, present only when a drafter verified at
        least one round."""
        if not self.draft_rounds:
            return {}
        return {
            "draft_n": self.draft_n,
            "draft_n_accepted": self.draft_n_accepted,
            "draft_rounds": self.draft_rounds,
            "draft_kind": self.draft_kind,
        }


@dataclass
class TokenEvent:
    """One generated token. `text` is what may be shown now; it is empty while a
    partial stop string or an incomplete UTF-8 sequence is held back."""

    token: int
    text: str
    logprob: float | None = None
    top_logprobs: list[tuple[int, float]] | None = None  # (token, logprob), most likely first
    # post-sampling (GenerationRequest.post_sampling_probs): the sampler chain's probability
    # of the token, and its surviving candidates (token, probability), most likely first
    prob: float | None = None
    top_probs: list[tuple[int, float]] | None = None


@dataclass
class FinishEvent:
    reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    timings: Timings
    text: str = ""  # held-back text released at the end
    stop_word: str | None = None
    stopped_by_eos: bool = False
    seed: int | None = None
    slot_id: int | None = None
    error: str | None = None
    failure: Failure | None = None  # why an ERROR finish failed, where the APIs answer it apart
    truncated: bool = False  # the slot's context ran out: generation stopped there, or shifted it
    # the end-of-generation token that ended it, with its probabilities, when the
    # request asked for them (it is no TokenEvent: no API shows it as text)
    end_token: TokenEvent | None = None


@dataclass
class PromptProgressEvent:
    """Prefill progress (llama-server's `prompt_progress`): sent once the slot holds the
    request (`processed` == `cache`), then after each decoded chunk of the prompt. Only
    requests with `report_progress` get them."""

    total: int  # prompt tokens
    cache: int  # of them, reused from the slot's previous contents
    processed: int  # of them, now in the slot (cache included)
    time_ms: int  # since the slot took the request


EngineEvent = TokenEvent | FinishEvent | PromptProgressEvent

_request_ids = itertools.count(1)


@dataclass
class GenerationRequest:
    """Everything the engine needs to run one generation; no wire format inside."""

    prompt_tokens: list[int]
    emit: Callable[[EngineEvent], None]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int = -1  # -1: until end of generation or of the slot's context
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False
    n_keep: int = 0  # context shift: prompt tokens kept at the start (-1: the whole prompt)
    n_discard: int = 0  # context shift: tokens dropped after them (0: half of the rest)
    id_slot: int = -1  # llama-server's id_slot: run in this slot (waiting for it); -1: any
    n_indent: int = 0  # llama-server's indentation stop for code completion (0: off)
    t_max_predict_ms: float = 0.0  # llama-server's time stop at a newline (0: off)
    priority: Priority = Priority.NORMAL
    cache_prompt: bool = True
    cache_reuse: int | None = None  # llama-server's n_cache_reuse: least run moved into place (None: the server's)
    lora: tuple[float, ...] | None = None  # a scale per loaded LoRA adapter; None: the server's at admission
    logprobs: int | None = None  # None: off; k: the chosen token's logprob and the k most likely
    post_sampling_probs: bool = False  # with logprobs: probabilities after the sampler chain instead
    loop_detection: tuple[int, int, int] | None = None  # (max_pattern, min_pattern, min_count)
    # thinking budget: after this many reasoning tokens the close marker is forced
    reasoning_budget: int | None = None
    reasoning_markers: tuple[str, str] = ("", "")  # the (open, close) text of a reasoning block
    reasoning_close_tokens: list[int] = field(default_factory=list)  # forced when the budget runs out
    reasoning_open_at_start: bool = False
    report_progress: bool = False  # emit PromptProgressEvents while prefilling
    constraint: TokenConstraint | None = None  # every token keeps the output valid (structured output)
    prediction: list[int] = field(default_factory=list)  # the output expected back (drafted from while it holds)
    # positions of prompt_tokens fed from a projector's embeddings (images, audio); they hold stand-in ids
    media: MediaLayout = field(default_factory=lambda: MediaLayout(()))
    fault: Any = None  # mlxcel.engine.faults.Fault: a fault a test injects (never set in service)
    id: int = field(default_factory=lambda: next(_request_ids))
    created: float = field(default_factory=time.monotonic)
    # set by the engine when a slot takes the request (before its first event): the slot
    # llama-server's stream chunks name in `id_slot`
    taken_by: int | None = None
