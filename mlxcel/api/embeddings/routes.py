"""POST /v1/embeddings (OpenAI's shape) and POST /embedding, /embeddings (llama-server's
native shape: not an alias). Inputs of one request, and of concurrent ones, are
embedded together by the embedding engine's batches."""

from __future__ import annotations

import asyncio
import json

from fastapi import APIRouter, Request
from fastapi.responses import Response

from mlxcel.api.embeddings.wire import EmbeddingsRequest
from mlxcel.http.errors import invalid_request, not_supported
from mlxcel.http.fleet_opening import check_service_model
from mlxcel.http.json_body import read_model
from mlxcel.http.request_context import request_context, run_while_connected
from mlxcel.turn.embedding_host import EmbeddingHost
from mlxcel.turn.embedding_vectors import floats_json, normalize, to_base64
from mlxcel.turn.errors import GenerationFailed

router = APIRouter()


async def _open(request: Request) -> tuple[EmbeddingHost, EmbeddingsRequest]:
    host: EmbeddingHost | None = getattr(request.app.state, "embedding_host", None)
    if host is None:
        raise not_supported("This server does not support embeddings. Start it with `--embeddings` "
                            "or `--embedding-model`")
    _, body = await read_model(request, EmbeddingsRequest)
    check_service_model(request, body.model, host.model_id, host.config.embedding_model)
    host.require_ready()
    return host, body


async def _embed(request: Request, host: EmbeddingHost, body: EmbeddingsRequest):
    inputs = body.inputs()
    prepared = await asyncio.to_thread(host.tokenize, inputs, body.truncate)
    priority = request_context(request, "embd-").priority
    # a client that leaves drops its inputs not yet run
    return prepared, await run_while_connected(request, host.embed(prepared, priority))


@router.post("/v1/embeddings")
async def openai_embeddings(request: Request):
    host, body = await _open(request)
    if body.input is None and body.content is not None:  # llama-server: `content` is not OpenAI's: native shape
        return await _native(request, host, body)
    if host.pooling == "none":
        raise invalid_request("Pooling type 'none' is not OAI compatible. Please use a different pooling type")
    use_base64 = body.use_base64()
    mode = body.normalization(host.config.embd_normalize)
    if body.dimensions is not None and body.dimensions != host.dimensions:
        raise invalid_request(f"dimensions {body.dimensions}: the model {host.model_id} embeds into "
                              f"{host.dimensions} dimensions and cannot shorten its vectors", param="dimensions")
    prepared, rows = await _embed(request, host, body)
    # rendering thousands of vectors is CPU work (2048 of 384 floats: about 0.3 s): off the event loop
    return await asyncio.to_thread(_openai_answer, body.model or host.model_id, rows, mode, use_base64,
                                   prepared.n_tokens)


def _openai_answer(model: str, rows, mode: int, use_base64: bool, n_tokens: int) -> Response:
    items = []
    for index, row in enumerate(rows):
        vector = normalize(row, mode)
        if use_base64:
            items.append(f'{{"embedding":"{to_base64(vector)}","index":{index},"object":"embedding",'
                         '"encoding_format":"base64"}')
        else:
            items.append(f'{{"embedding":{_floats(vector)},"index":{index},"object":"embedding"}}')
    head = json.dumps({"model": model, "object": "list",
                       "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}}, ensure_ascii=False)
    return _raw_json(head[:-1] + ',"data":[' + ",".join(items) + "]}")


@router.post("/embedding")
@router.post("/embeddings")
async def native_embeddings(request: Request):
    host, body = await _open(request)
    return await _native(request, host, body)


async def _native(request: Request, host: EmbeddingHost, body: EmbeddingsRequest) -> Response:
    """A list of {index, embedding}: `embedding` holds the pooled vector (normalised
    by embd_normalize), or with pooling none one raw vector per token."""
    body.use_base64()  # checked as llama-server does, though this shape is always floats
    mode = body.normalization(host.config.embd_normalize)
    _, rows = await _embed(request, host, body)
    return await asyncio.to_thread(_native_answer, rows, host.pooling == "none", mode)  # CPU work: as above


def _native_answer(rows, per_token: bool, mode: int) -> Response:
    items = []
    for index, row in enumerate(rows):
        if per_token:
            vectors = ",".join(_floats(token_row) for token_row in row)
        else:
            vectors = _floats(normalize(row, mode))
        items.append(f'{{"index":{index},"embedding":[{vectors}]}}')
    return _raw_json("[" + ",".join(items) + "]")


def _floats(vector) -> str:
    try:
        return floats_json(vector)
    except ValueError as exc:
        raise GenerationFailed(str(exc)) from None


def _raw_json(body: str) -> Response:
    """The body rendered here (vectors are formatted by floats_json, not json.dumps)."""
    return Response(body.encode("utf-8"), media_type="application/json")
