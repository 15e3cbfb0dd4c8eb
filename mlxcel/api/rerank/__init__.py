"""Reranking: POST /v1/rerank, /v1/reranking, /rerank and /reranking."""
