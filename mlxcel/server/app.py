"""The FastAPI application: routes, error mapping, authentication, lifecycle."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI

from mlxcel import __version__
from mlxcel.config import ServerConfig
from mlxcel.http.api_prefix import ApiPrefixMiddleware
from mlxcel.http.auth import APIKeyMiddleware
from mlxcel.http.cors import CorsMiddleware, CorsPolicy
from mlxcel.http.errors import install_error_handlers
from mlxcel.turn.model_host import ModelHost
from mlxcel.turn.rerank_host import rerank_host_for
from mlxcel.api.responses.state import ResponsesState
from mlxcel.api.anthropic import routes as anthropic
from mlxcel.api.native import infill
from mlxcel.api.native import routes as native
from mlxcel.api.openai import chat_routes as chat
from mlxcel.api.openai import completions_routes as completions
from mlxcel.api.rerank import routes as rerank
from mlxcel.api.responses import routes as responses
from mlxcel.observability import metrics
from mlxcel.server.routes import cache, info, llama_admin

log = logging.getLogger("mlxcel.server")


def create_app(config: ServerConfig, on_load_failure: Callable[[str], None] | None = None) -> FastAPI:
    host = ModelHost(config)
    reranker = rerank_host_for(config, host.model_id)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        host.start_loading(on_load_failure or (lambda _message: None))
        if reranker is not None:
            reranker.start_loading(on_load_failure or (lambda _message: None))
        yield
        host.shutdown()
        if reranker is not None:
            reranker.shutdown()

    app = FastAPI(title="mlxcel", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.host = host
    app.state.config = config
    app.state.rerank = reranker
    app.state.responses = ResponsesState(config.responses, config.cache_prompt)
    install_error_handlers(app)
    app.include_router(info.router)
    app.include_router(cache.router)
    app.include_router(chat.router)
    app.include_router(anthropic.router)
    app.include_router(completions.router)
    app.include_router(native.router)
    app.include_router(infill.router)
    app.include_router(responses.router)
    app.include_router(llama_admin.router)
    app.include_router(rerank.router)
    app.include_router(metrics.router)  # without --metrics it answers 501, as llama-server does
    # middleware added last runs first: CORS (answers OPTIONS anywhere), prefix, key
    if config.api_keys:
        app.add_middleware(APIKeyMiddleware, keys=config.api_keys)
    if config.api_prefix:
        app.add_middleware(ApiPrefixMiddleware, prefix=config.api_prefix)
    policy = CorsPolicy(config.cors_origins, config.cors_methods, config.cors_headers, config.cors_credentials)
    app.add_middleware(CorsMiddleware, policy=policy)
    return app
