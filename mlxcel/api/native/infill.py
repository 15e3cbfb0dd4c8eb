"""llama-server's POST /infill: fill-in-the-middle on a model with FIM tokens. The
prompt is built from the text around the cursor and the repository chunks, then
served exactly as /completion serves a token prompt (same response, same stream)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, Request

from mlxcel.api.native.infill_wire import InfillRequest
from mlxcel.api.native.routes import native_completion
from mlxcel.http.errors import invalid_request
from mlxcel.http.opening import Opened, opening
from mlxcel.turn.infill_prompt import ExtraChunk, InfillBudget, infill_prompt, require_fim, tokenize_mixed

router = APIRouter()
INFILL = opening(InfillRequest, "cmpl-", api="native")
EXTRA_SHAPE = '"input_extra" must be an array of {"filename": string, "text": string}'


def _text_or_tokens(data: dict, name: str):
    """`input_prefix` / `input_suffix`: required; a string or an array of strings and token ids."""
    if name not in data:
        raise invalid_request(f'"{name}" is required')
    value = data[name]
    if isinstance(value, str) or (isinstance(value, list) and all(
            isinstance(p, str) or (isinstance(p, int) and not isinstance(p, bool)) for p in value)):
        return value
    raise invalid_request(f'"{name}" must be a string or an array of strings and token ids')


def _extra_chunks(data: dict) -> list[ExtraChunk]:
    raw = data.get("input_extra", [])
    if not isinstance(raw, list):
        raise invalid_request(EXTRA_SHAPE)
    chunks = []
    for chunk in raw:
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text"), str):
            raise invalid_request('extra_context chunk must contain a "text" field with a string value')
        if "filename" in chunk and not isinstance(chunk["filename"], str):
            raise invalid_request('extra_context chunk\'s "filename" field must be a string')
        chunks.append(ExtraChunk(chunk["text"], chunk.get("filename", "tmp")))
    return chunks


@router.post("/infill")
async def infill(request: Request, opened: Opened[InfillRequest] = Depends(INFILL)):
    host, data, body = opened.host, opened.data, opened.body
    tokenizer, config = host.tokenizer, host.config
    require_fim(tokenizer.fim)  # checked first, as llama-server does: 501 on a model without them
    if "prompt" in data and not isinstance(data["prompt"], str):
        raise invalid_request('"prompt" must be a string')
    prefix, suffix = _text_or_tokens(data, "input_prefix"), _text_or_tokens(data, "input_suffix")
    chunks = _extra_chunks(data)
    budget = InfillBudget(config.batch_size, config.n_predict, host.slot_context)

    def build() -> list[int]:
        prompt = tokenizer.encode(data.get("prompt", ""), add_special=False, parse_special=True)
        return infill_prompt(tokenizer, tokenize_mixed(tokenizer, prefix), tokenize_mixed(tokenizer, suffix),
                             chunks, prompt, budget, spm=config.spm_infill)

    tokens = await asyncio.to_thread(build)  # tokenizing long chunks is CPU work: off the event loop
    completion = body.model_copy(update={"prompt": tokens})
    return await native_completion(request, Opened(host, data, completion, opened.context))
