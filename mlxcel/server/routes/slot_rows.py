"""The rows of GET /slots: the spec's fields (id, state, model, context_size,
is_processing) and llama-server's (n_ctx, speculative, id_task, the prompt's counts,
params, next_token) for the request each slot runs or last ran, then one row for each
request waiting for a slot. Like llama-server by default, no prompt or generated text."""

from __future__ import annotations

from mlxcel.engine.slot_task import SlotTask
from mlxcel.engine.snapshot import EngineSnapshot, SlotView
from mlxcel.turn.model_host import ModelHost

# the sampling parameters llama-server's /slots lists (SamplingParams names them alike)
_SAMPLING_FIELDS = (
    "seed", "temperature", "dynatemp_range", "dynatemp_exponent", "top_k", "top_p", "min_p", "top_n_sigma",
    "xtc_probability", "xtc_threshold", "typical_p", "repeat_last_n", "repeat_penalty", "presence_penalty",
    "frequency_penalty", "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n", "mirostat",
    "mirostat_tau", "mirostat_eta", "adaptive_target", "adaptive_decay", "min_keep",
)


def slot_rows(host: ModelHost, snapshot: EngineSnapshot) -> list[dict]:
    rows = [_slot_row(host, view, snapshot.speculative) for view in snapshot.slots]
    # each request waiting for a slot, in the order it would be served (the spec's queued
    # rows: numbered on from the slots, never processing)
    rows += [{**_base(host, place, "queued", False), "id_task": queued.request_id,
              "n_prompt_tokens": queued.n_prompt_tokens, "n_decoded": 0, "n_cached": 0, "lora": []}
             for place, queued in enumerate(snapshot.queued, start=len(snapshot.slots))]
    return rows


def _base(host: ModelHost, id: int, state: str, processing: bool) -> dict:
    return {"id": id, "state": state, "model": host.model_id, "context_size": host.slot_context,
            "is_processing": processing, "n_ctx": host.slot_context}


def _slot_row(host: ModelHost, view: SlotView, speculative: bool) -> dict:
    row = {**_base(host, view.id, view.state.value, view.busy), "speculative": speculative,
           "id_task": view.request_id, "n_prompt_tokens": view.n_prompt_tokens, "n_decoded": view.n_decoded,
           "n_cached": view.n_cached,
           # the LoRA scales the slot runs (or last ran) with, as llama-server's slot params list them
           "lora": _lora(view.lora)}
    task = view.task
    if task is None:  # never used
        return row
    if view.busy:
        processed, cached, decoded = view.n_prompt_processed, view.n_reused, view.n_decoded
    else:  # llama-server shows the last task of an idle slot
        processed, cached, decoded = task.n_prompt_processed, task.n_prompt_tokens - task.n_prompt_processed, \
            task.n_decoded
        row.update(id_task=task.id, n_prompt_tokens=task.n_prompt_tokens)
    row.update(n_prompt_tokens_processed=processed, n_prompt_tokens_cache=cached, params=_params(task, view.lora),
               next_token=[{"has_next_token": view.busy, "n_remain": _remaining(task, decoded),
                            "n_decoded": decoded}])
    return row


def _params(task: SlotTask, lora: tuple[float, ...]) -> dict:
    sampling = task.sampling
    params = {name: getattr(sampling, name) for name in _SAMPLING_FIELDS}
    params.update(max_tokens=task.max_tokens, n_predict=task.max_tokens, n_keep=task.n_keep, n_discard=task.n_discard,
                  ignore_eos=task.ignore_eos, n_probs=task.n_probs, post_sampling_probs=task.post_sampling_probs,
                  samplers=list(sampling.samplers), lora=_lora(lora))
    return params


def _remaining(task: SlotTask, decoded: int) -> int:
    """Tokens it may still generate, -1 without a limit (llama-server's n_remain)."""
    return -1 if task.max_tokens < 0 else max(0, task.max_tokens - decoded)


def _lora(scales: tuple[float, ...]) -> list[dict]:
    return [{"id": i, "scale": scale} for i, scale in enumerate(scales)]
