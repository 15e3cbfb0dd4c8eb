"""llama-server's `__verbose` object: with `--verbose` (or a request's `"verbose":
true`), OpenAI-shaped responses carry the native /completion final result of each
generation beside their own fields, for debugging."""

from __future__ import annotations

from mlxcel.engine.request import FinishEvent, FinishReason, GenerationRequest
from mlxcel.turn.generation_settings import generation_settings


def stop_type(finish: FinishEvent) -> str:
    """llama-server's `stop_type`: eos, word, limit or none."""
    if finish.stopped_by_eos:
        return "eos"
    if finish.stop_word is not None:
        return "word"
    if finish.reason is FinishReason.LENGTH:
        return "limit"
    return "none"


def verbose_object(
    index: int,
    request: GenerationRequest,
    finish: FinishEvent,
    model: str,
    prompt: str,
    text: str,
    tokens: list[int],
    streamed: bool,
) -> dict:
    """The final native result of one generation. A stream has already sent the text,
    so its object carries none (as in llama-server)."""
    return {
        "index": index,
        "content": "" if streamed else text,
        "tokens": [] if streamed else tokens,
        "id_slot": finish.slot_id if finish.slot_id is not None else -1,
        "stop": True,
        "model": model,
        "tokens_predicted": finish.completion_tokens,
        "tokens_evaluated": finish.prompt_tokens,
        "generation_settings": generation_settings(request.sampling, request.max_tokens, request.stop,
                                                   request.ignore_eos, finish.seed, lora=request.lora),
        "prompt": prompt,
        "has_new_line": "\n" in text,
        "truncated": False,
        "stop_type": stop_type(finish),
        "stopping_word": finish.stop_word or "",
        "tokens_cached": finish.prompt_tokens + finish.completion_tokens,
        "timings": finish.timings.to_dict(),
    }
