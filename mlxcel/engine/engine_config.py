"""What an engine is made with: its queue, prefill, cache and speculation settings and
the collaborators it builds per slot."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mlxcel.engine.compute_gate import COMPUTE_GATE, ComputeGate
from mlxcel.engine.constraints import MaskerFactory
from mlxcel.engine.draft_model import DraftModel
from mlxcel.engine.draft_policy import DecodeCosts
from mlxcel.engine.lookup_cache import LookupCaches
from mlxcel.engine.prompt_cache import HostPromptCache
from mlxcel.engine.sampling import SamplerChain


@dataclass(frozen=True)
class EngineConfig:
    queue_cap: int = 64  # requests waiting for a slot, beyond those running
    prefill_chunk: int = 256  # prompt tokens per step while other slots decode
    cache_prompt: bool = True  # reuse a slot's previous tokens as a prompt prefix
    cache_reuse: int = 0  # --cache-reuse: shortest run past the prefix moved into place (0: off)
    context_shift: bool = False  # at the slot context's end, drop old tokens and go on (else stop there)
    host_cache: HostPromptCache | None = None  # KV states saved beyond the slots
    lookup_ngram: int = 0  # prompt-lookup speculation: n-gram size (0: off)
    drafter: DraftModel | None = None  # draft-model speculation (--model-draft)
    draft_max: int = 16  # most tokens a draft model drafts per verify round
    lookup_max: int = 48  # most tokens prompt lookup drafts per verify round
    traffic_tokens: int = 0  # prompt lookup also drafts from this many tokens of earlier outputs (0: not)
    lookup_caches: LookupCaches | None = None  # prompt lookup also drafts from llama.cpp's lookup caches
    draft_min: int = 2  # fewer drafted tokens than this are not worth a round
    decode_costs: DecodeCosts | None = None  # measured batch costs; speculation sizes drafts by them
    on_failure: Callable[[str], None] | None = None  # told once when the engine itself fails
    masker: MaskerFactory | None = None  # builds the structured-output masker; None: no constrained requests
    sampler: Callable[..., SamplerChain] = SamplerChain  # builds a slot's sampler (SamplerChain's arguments)
    gate: ComputeGate = COMPUTE_GATE  # the engines of one process take turns computing through it
