"""Embeddings: OpenAI's POST /v1/embeddings and llama-server's native /embedding and /embeddings."""
