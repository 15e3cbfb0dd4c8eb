"""The FastAPI application: routes, error mapping, authentication, lifecycle."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI

from mlxcel import __version__
from mlxcel.api.anthropic import routes as anthropic
from mlxcel.api.audio import speech_routes
from mlxcel.api.audio import transcription_routes as transcriptions
from mlxcel.api.embeddings import routes as embeddings
from mlxcel.api.native import infill
from mlxcel.api.native import routes as native
from mlxcel.api.openai import chat_control, estimate
from mlxcel.api.openai import chat_routes as chat
from mlxcel.api.openai import completions_routes as completions
from mlxcel.api.rerank import listing as rerank_listing
from mlxcel.api.rerank import routes as rerank
from mlxcel.api.responses import routes as responses
from mlxcel.api.responses.state import ResponsesState
from mlxcel.config import ServerConfig
from mlxcel.fleet.entries import FleetConfig
from mlxcel.fleet.monitor import ServerMonitor
from mlxcel.fleet.residency import Fleet, idle_sweeper
from mlxcel.http.api_prefix import ApiPrefixMiddleware
from mlxcel.http.auth import OPEN_PATHS, APIKeyMiddleware
from mlxcel.http.cors import CorsMiddleware, CorsPolicy
from mlxcel.http.errors import install_error_handlers
from mlxcel.http.fleet_opening import LeaseMiddleware
from mlxcel.http.head_requests import HeadAsGetMiddleware
from mlxcel.http.metrics_port import MetricsPortMiddleware
from mlxcel.http.static_files import StaticFilesMiddleware
from mlxcel.http.stream_sessions import StreamSessions
from mlxcel.observability import metrics
from mlxcel.server.idle_sleep import IdleSleep, IdleSleepMiddleware, SleepPlan, watching
from mlxcel.server.routes import (
    cache,
    capacity,
    cors_proxy,
    info,
    llama_admin,
    residency,
    router_models,
    streams,
    tools,
    unserved,
)
from mlxcel.server.routes.vertex import add_vertex_routes
from mlxcel.server.startup_gc import settle_startup_objects
from mlxcel.server.webui import ASSET_PATHS as WEBUI_ASSETS
from mlxcel.server.webui import WORKER_PATH, WebUIMiddleware
from mlxcel.speech.stt_host import SttHost
from mlxcel.speech.tts_host import SpeechHost
from mlxcel.state.store import StateBackend
from mlxcel.state.url import open_state
from mlxcel.toolbox import build_tools, kill_running_groups
from mlxcel.toolbox.mcp import McpHub, add_mcp_tools
from mlxcel.turn.embedding_host import EmbeddingHost, model_id_of
from mlxcel.turn.live_completions import LiveCompletions
from mlxcel.turn.model_host import ModelHost
from mlxcel.turn.rerank_host import RerankHost, rerank_host_for

log = logging.getLogger("mlxcel.server")


def _warn_of_machine_access(config: ServerConfig) -> None:
    """One warning line at start, as llama-server logs one, naming what lets a caller act
    on this machine (run commands, read files, reach other servers from here)."""
    features = [name for name, on in (("server tools (POST /tools)", bool(config.server_tools)),
                                      ("MCP servers", bool(config.mcp_servers)),
                                      ("the MCP proxy (/cors-proxy)", config.cors_proxy)) if on]
    if features:
        log.warning("security: %s on: callers act on this machine through them; do not expose this server to "
                    "untrusted networks", ", ".join(features))


def served_worker(host: ModelHost | None, embedding: EmbeddingHost | None,
                  reranker: RerankHost | None) -> EmbeddingHost | RerankHost | None:
    """The model a server started with --embedding or --reranking serves; None where a chat
    model (or a fleet of them) is served and these models, if any, stand beside it."""
    if host is None or not host.absent:
        return None
    return embedding if host.config.embedding_only else reranker


def idle_sleepers(config: ServerConfig, host: ModelHost | None, served: EmbeddingHost | RerankHost | None,
                  embedding: EmbeddingHost | None, reranker: RerankHost | None, stt_host: SttHost | None,
                  tts_host: SpeechHost | None, responses_state: ResponsesState) -> SleepPlan | None:
    """--sleep-idle-seconds: the served model sleeps when idle (the chat model, or with --embedding
    or --reranking that model), and each model served beside it (embedding, reranker, speech)
    sleeps on its own, idle when its routes are."""
    if config.sleep_idle_seconds <= 0:
        return None
    idle_s = config.sleep_idle_seconds
    beside = [(embedding, embeddings.router, lambda: info.beside_asleep_answers(embedding)),
              (reranker, rerank.router, lambda: rerank_listing.beside_asleep_answers(reranker)),
              (stt_host, transcriptions.router, dict), (tts_host, speech_routes.router, dict)]
    if host is None:
        main = None  # many chat models: the fleet puts each to sleep (Fleet.expire_idle)
    elif served is None:
        main = IdleSleep(host, idle_s, describe=lambda: info.asleep_answers(host, embedding, reranker),
                         held=lambda: len(responses_state.jobs) > 0)  # background responses
    elif served is embedding:
        main = IdleSleep(embedding, idle_s, describe=lambda: info.embedding_asleep_answers(embedding))
    else:
        main = IdleSleep(reranker, idle_s, describe=lambda: rerank_listing.asleep_answers(reranker, __version__))
    plan = SleepPlan(main)
    for service, router, describe in beside:
        if service is not None and (main is None or service is not main.host):
            sleeper = IdleSleep(service, idle_s, describe=describe)
            plan.beside.update(dict.fromkeys((route.path for route in router.routes), sleeper))
    return plan if plan.sleepers else None


def create_app(
    config: ServerConfig,
    on_load_failure: Callable[[str], None] | None = None,
    fleet_config: FleetConfig | None = None,
    state: StateBackend | None = None,
) -> FastAPI:
    """One model (`-m`), or with `fleet_config` (--config FILE) many, each loaded on demand.
    `state`: the opened state store (else the one --state-url names is opened here)."""
    state = state or open_state(config.state_url)
    responses_state = ResponsesState(config.responses, config.cache_prompt, state)
    fleet = Fleet(fleet_config, config) if fleet_config is not None else None
    host = ModelHost(config) if fleet is None else None
    main_id = host.model_id if host is not None else (fleet_config.default_model or "")
    embedding_host = None
    if config.embedding_source is not None:
        embedding_id = main_id if config.embedding_only else model_id_of(config.embedding_source)
        embedding_host = EmbeddingHost(config, config.embedding_source, embedding_id)
    reranker = rerank_host_for(config, main_id)
    stt_host = SttHost(config, config.stt_model) if config.stt_model else None
    tts_host = SpeechHost(config, config.tts_model) if config.tts_model else None
    monitor = ServerMonitor(config, host, fleet)
    server_tools = build_tools(config.server_tools)  # --tools (none, and no MCP tools: /tools answers 403)
    _warn_of_machine_access(config)
    mcp_hub = McpHub(config.mcp_servers) if config.mcp_servers else None
    served = served_worker(host, embedding_host, reranker)
    sleepers = idle_sleepers(config, host, served, embedding_host, reranker, stt_host, tts_host, responses_state)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        on_failure = on_load_failure or (lambda _message: None)
        sweeper = None
        if host is not None:
            host.start_loading(on_failure)
        else:
            await asyncio.to_thread(fleet.start)
            sweeper = idle_sweeper(fleet)()
        for service in (embedding_host, reranker, stt_host, tts_host):
            if service is not None:
                service.start_loading(on_failure)
        responses_state.start()
        if mcp_hub is not None:  # each server started once to list its tools
            add_mcp_tools(server_tools, await mcp_hub.discover())
        governor = asyncio.get_running_loop().create_task(monitor.run())
        job_watch = asyncio.get_running_loop().create_task(responses_state.watch())
        settle_startup_objects()
        async with watching(sleepers):
            yield
        kill_running_groups()  # POST /tools' commands and searches still running: not left behind
        app.state.stream_sessions.close()  # readers of resumable streams end
        governor.cancel()
        job_watch.cancel()
        responses_state.stop()
        if sweeper is not None:
            sweeper.cancel()
        if host is not None:
            host.shutdown()
        else:
            await asyncio.to_thread(fleet.shutdown)
        for service in (embedding_host, reranker, stt_host, tts_host):
            if service is not None:
                service.shutdown()
        if mcp_hub is not None:
            await mcp_hub.close()
        if app.state.proxy_client is not None:
            await app.state.proxy_client.aclose()
        state.close()

    def end_requests() -> None:
        """Late in a stop, for requests still running: their engines finish each as shut
        down, so an answer ends with its error (a stream with its error event) instead of
        being cancelled by uvicorn, with a traceback each."""
        hosts = [host] if host is not None else [resident.host for resident in fleet.resident_list()]
        for worker in (*hosts, embedding_host, reranker):
            if worker is not None and worker.engine is not None:
                worker.engine.stop()

    app = FastAPI(title="mlxcel", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.end_requests = end_requests
    app.state.host = host  # None with many models: routes reach theirs through app.state.fleet
    app.state.fleet = fleet
    app.state.monitor = monitor
    app.state.embedding_host = embedding_host
    app.state.config = config
    app.state.live_completions = LiveCompletions()  # chat completions running now, for /v1/chat/completions/control
    app.state.stream_sessions = StreamSessions()  # resumable streams (X-Conversation-Id), for /v1/stream
    app.state.rerank = reranker
    app.state.served_worker = served  # with --embedding or --reranking: the model served
    app.state.stt_host = stt_host  # None without --stt-model: the audio routes answer 501
    app.state.tts_host = tts_host
    app.state.responses = responses_state
    app.state.server_tools = server_tools
    app.state.proxy_client = cors_proxy.new_client() if config.cors_proxy else None  # /cors-proxy
    install_error_handlers(app)
    app.include_router(info.router)
    app.include_router(cache.router)
    app.include_router(chat.router)
    app.include_router(chat_control.router)
    app.include_router(streams.router)
    app.include_router(anthropic.router)
    app.include_router(completions.router)
    app.include_router(native.router)
    app.include_router(infill.router)
    app.include_router(responses.router)
    app.include_router(llama_admin.router)
    app.include_router(residency.router)
    app.include_router(router_models.router)
    app.include_router(capacity.router)
    app.include_router(estimate.router)
    app.include_router(rerank.router)
    app.include_router(embeddings.router)
    app.include_router(transcriptions.router)
    app.include_router(speech_routes.router)
    app.include_router(tools.router)  # --tools: the web UI's agent tools
    app.include_router(cors_proxy.router)  # --ui-mcp-proxy: the web UI's requests to remote MCP servers
    app.include_router(unserved.router)  # image generation, structured decisions: 501 naming what they need
    app.include_router(metrics.router)  # without --metrics it answers 501, as llama-server does
    # middleware added last runs first: CORS (answers OPTIONS anywhere), prefix, key, static files, HEAD as GET, sleep
    vertex = config.vertex
    vertex_health = frozenset({vertex.health_route} if vertex is not None and vertex.health_route else ())
    if sleepers is not None:
        app.state.sleepers = sleepers
        # Vertex AI's predict route needs no model of its own: each instance goes through this
        # middleware again, waking the model its route needs (and only that one)
        predict = frozenset({vertex.predict_route} if vertex is not None else ())
        modelless = unserved.PATHS | tools.PATHS | cors_proxy.PATHS | predict
        app.add_middleware(IdleSleepMiddleware, plan=sleepers, routes=lambda: app.router.routes,
                           describing=vertex_health, modelless=modelless)
    app.add_middleware(HeadAsGetMiddleware)  # inside static files and the web UI, which answer HEAD themselves
    # the page (not with --no-webui) and /sw.js; --path's own files, added after it, are served first
    app.add_middleware(WebUIMiddleware, prefix=config.api_prefix or "", page=config.webui)
    if config.static_path:
        app.add_middleware(StaticFilesMiddleware, folder=config.static_path)
    if vertex is not None:  # Google Cloud Vertex AI's container contract (AIP_MODE=PREDICTION)
        add_vertex_routes(app, vertex, config.api_prefix)
    if config.api_keys:
        webui_assets = (WEBUI_ASSETS if config.webui else frozenset()) | {WORKER_PATH}
        app.add_middleware(APIKeyMiddleware, keys=config.api_keys, open_paths=OPEN_PATHS | vertex_health | webui_assets)
    if config.api_prefix:
        app.add_middleware(ApiPrefixMiddleware, prefix=config.api_prefix)
    policy = CorsPolicy(config.cors_origins, config.cors_methods, config.cors_headers, config.cors_credentials)
    app.state.cors_policy = policy  # POST /tools refuses pages it does not allow
    app.add_middleware(CorsMiddleware, policy=policy)
    if config.metrics_port is not None:  # on that port, /metrics alone
        app.add_middleware(MetricsPortMiddleware, port=config.metrics_port, prefix=config.api_prefix)
    if fleet is not None:
        app.add_middleware(LeaseMiddleware)  # outermost: a lease ends as the response's last byte goes out
    return app
