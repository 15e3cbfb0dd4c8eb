"""POST /v1/rerank, /v1/reranking, /rerank and /reranking: documents scored against
a query by the rerank model, the best first."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request

from mlxcel.api.rerank.shaping import jina_envelope, tei_array
from mlxcel.api.rerank.wire import RerankRequest
from mlxcel.http.errors import not_supported
from mlxcel.http.fleet_opening import check_service_model
from mlxcel.http.json_body import read_model
from mlxcel.http.request_context import request_context, run_while_connected
from mlxcel.turn.rerank_host import RerankHost, RerankScoring

router = APIRouter()


def rerank_host(request: Request) -> RerankHost:
    host: RerankHost | None = getattr(request.app.state, "rerank", None)
    if host is None:
        raise not_supported("This server does not support reranking. Start it with `--reranking` "
                            "or `--rerank-model MODEL`")
    return host


@router.post("/v1/rerank")
@router.post("/v1/reranking")
@router.post("/rerank")
@router.post("/reranking")
async def rerank(request: Request):
    host = rerank_host(request)
    _, body = await read_model(request, RerankRequest)
    check_service_model(request, body.model, host.model_id, host.config.rerank_model)
    query, documents, top_n = body.checked_query(), body.checked_documents(), body.checked_top_n()
    return_documents, return_text, truncate = body.flag("return_documents"), body.flag("return_text"), \
        body.flag("truncate")
    activate = body.activates_scores()
    host.require_ready()
    context = request_context(request, f"rerank-{uuid.uuid4().hex}")
    # a client that leaves drops its pairs not yet run
    result = await run_while_connected(request, host.score(query, documents, context.priority, truncate))
    if body.is_tei:
        return tei_array(result.scores, documents, top_n, return_text,
                         activate and host.scoring is RerankScoring.RANK)
    return jina_envelope(host.model_id, result.scores, documents, top_n, return_documents, result.n_tokens)
