"""How the reranker appears in /v1/models and /props: its id, its kind, and how it
scores (a cross-encoder's head, "rank", or cosine similarity of embeddings)."""

from __future__ import annotations

from mlxcel.turn.rerank_host import RerankHost


def model_entry(host: RerankHost) -> dict:
    entry = {"id": host.model_id, "object": "model", "created": host.created, "owned_by": "user", "kind": "rerank"}
    if host.sleeping and "meta" in host.asleep:  # --sleep-idle-seconds: as it was before it slept
        entry["scoring"] = host.scoring.value
        entry["meta"] = host.asleep["meta"]
    elif host.ready:
        entry["scoring"] = host.scoring.value
        entry["meta"] = meta(host)
    return entry


def meta(host: RerankHost) -> dict:
    runtime = host.runtime
    return {"n_vocab": host.tokenizer.n_vocab, "n_ctx_train": runtime.n_ctx_train,
            "n_ctx": runtime.max_input_tokens, "pooling": runtime.pooling}


def asleep_answers(host: RerankHost, version: str) -> dict:
    """What /props and /v1/models answer while a --reranking server's model sleeps."""
    return {"props": rerank_only_props(host, version), "meta": meta(host)}


def beside_asleep_answers(host: RerankHost) -> dict:
    """What /props and /v1/models say of a reranker beside the chat model while it sleeps."""
    return {"props": props_entry(host), "meta": meta(host)}


def props_entry(host: RerankHost) -> dict:
    """The reranker's figures; `n_decodes` and `n_pairs` count the decodes and the pairs
    scored since it loaded (pairs a client left before they ran are not scored)."""
    engine = host.engine
    return {"model": host.model_id, "model_path": str(host.model_path or host.source), "ready": host.ready,
            "scoring": host.scoring.value if host.scoring is not None else None,
            "n_ctx": host.runtime.max_input_tokens if host.runtime is not None else None,
            "n_decodes": engine.stats.decodes if engine is not None else 0,
            "n_pairs": engine.stats.inputs_done if engine is not None else 0}


def health(host: RerankHost) -> dict:
    """/health of a server started with --reranking."""
    engine = host.engine
    if not engine.alive:
        return {"status": "error", "error": engine.failure or "the rerank engine stopped"}
    return {"status": "ok", "model": host.model_id,
            "batch": {"queue_depth": engine.queue_depth, "max_batch_size": host.runtime.n_seq_max},
            "context_size": host.runtime.max_input_tokens}


def rerank_only_props(host: RerankHost, version: str) -> dict:
    """/props of a server started with --reranking: the reranker's figures."""
    return {"model_alias": host.model_id, "model_path": str(host.model_path), "n_ctx": host.runtime.max_input_tokens,
            "total_slots": host.runtime.n_seq_max, "rerank": props_entry(host), "build_info": f"mlxcel {version}",
            "endpoint_slots": False, "endpoint_props": False, "endpoint_metrics": host.config.metrics,
            "is_sleeping": False,
            "modalities": {"vision": False, "video": False, "audio": False}}
