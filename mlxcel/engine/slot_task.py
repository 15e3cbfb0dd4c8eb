"""What /slots shows of the request a slot runs or last ran, as llama-server shows its
task (id, prompt size, sampling parameters, progress). It outlives the request, so it
holds none of it that could be large or keep a client alive (the prompt, the callbacks)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mlxcel.engine.request import GenerationRequest
from mlxcel.engine.sampling import SamplingParams


@dataclass(frozen=True)
class SlotTask:
    id: int
    n_prompt_tokens: int
    sampling: SamplingParams
    max_tokens: int
    n_keep: int
    n_discard: int
    ignore_eos: bool
    n_probs: int
    post_sampling_probs: bool
    # once it has ended (while it runs, the slot's own counters say)
    n_prompt_processed: int = 0  # prompt tokens it prefilled (not reused)
    n_decoded: int = 0

    @classmethod
    def of(cls, request: GenerationRequest) -> SlotTask:
        return cls(request.id, len(request.prompt_tokens), request.sampling, request.max_tokens, request.n_keep,
                   request.n_discard, request.ignore_eos, request.logprobs or 0, request.post_sampling_probs)

    def ended(self, n_prompt_processed: int, n_decoded: int) -> SlotTask:
        return dataclasses.replace(self, n_prompt_processed=n_prompt_processed, n_decoded=n_decoded)


def prompt_processed(n_past: int, n_prompt_tokens: int, n_reused: int) -> int:
    """The prompt tokens a slot has prefilled for its request so far (not those reused)."""
    return max(0, min(n_past, n_prompt_tokens) - n_reused)
