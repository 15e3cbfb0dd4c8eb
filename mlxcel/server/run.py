"""Starting uvicorn on a ServerConfig."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable

import uvicorn

from mlxcel.config import ServerConfig
from mlxcel.fleet.entries import FleetConfig
from mlxcel.fleet.residency import Fleet
from mlxcel.http.connection_guard import guarded_protocol
from mlxcel.observability.log_setup import configure_logging
from mlxcel.server.app import create_app
from mlxcel.server.listeners import ListenError, describe, open_listeners
from mlxcel.server.open_files import raise_open_files_limit
from mlxcel.state.url import StateUnavailable, open_state

log = logging.getLogger("mlxcel")


def _loading_threads() -> list[threading.Thread]:
    """Model loads still running (the chat model's, a side model's, a fleet member's)."""
    return [thread for thread in threading.enumerate()
            if thread.is_alive() and thread.daemon and thread.name.startswith("mlxcel-")
            and ("loader" in thread.name or thread.name.startswith("mlxcel-load-"))]


def _leave(code: int) -> int:
    """The server's exit code, once it has shut down. A model still loading on its
    thread (the server ended first: another model failed to load, or a signal came) is
    inside llama.cpp, whose log lines call back into Python: as the interpreter tears
    down, such a call crashes the process (SIGSEGV) after the answer was given. Then
    the process ends at once, with everything written out, instead of tearing down."""
    if not _loading_threads():
        return code
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _warn_gpu_flags(config: ServerConfig) -> None:
    """As llama-server: GPU placement flags on a llama.cpp built without GPU offload load
    every layer on the CPU, said once at start."""
    import llama_cpp

    asked = [flag for flag, given in (("-ngl", config.n_gpu_layers != 0), ("-sm", config.split_mode != "layer"),
                                      ("-mg", config.main_gpu != 0), ("-ts", bool(config.tensor_split))) if given]
    if asked and not llama_cpp.llama_supports_gpu_offload():
        log.warning("llama.cpp was built without GPU offload: %s have no effect (every layer runs on the CPU; "
                    "README: a GPU build)", " ".join(asked))


GRACE_S = 6  # a stop waits this long for the answers being given
ENDING_AT_S = 3  # into a stop, the engines finish what they still hold: the rest is for their answers to end


class _Server(uvicorn.Server):
    """uvicorn's server, which waits GRACE_S for open responses and then cancels them,
    each with a traceback in the log. So a stop first ends the streams that never end by
    themselves (GET /models/sse), and ENDING_AT_S in, has the engines finish the requests
    they still hold as shut down: each answer ends in order (a stream with its error
    event and its end) before uvicorn's cancel."""

    def __init__(self, config: uvicorn.Config, fleet: Fleet | None, end_requests: Callable[[], None]) -> None:
        super().__init__(config)
        self._fleet = fleet
        self._end_requests = end_requests

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._fleet is not None:
            self._fleet.events.end_streams()
        ending = asyncio.get_running_loop().create_task(self._end_late())
        try:
            await super().shutdown(sockets)
        finally:
            ending.cancel()

    async def _end_late(self) -> None:
        await asyncio.sleep(ENDING_AT_S)
        await asyncio.to_thread(self._end_requests)


def run_server(config: ServerConfig, fleet: FleetConfig | None = None) -> int:
    configure_logging(config.log, config.verbose)
    if config.ignored_flags:
        log.warning(
            "accepted and ignored llama-server flags (not applicable to mlxcel): %s", " ".join(config.ignored_flags)
        )
    _warn_gpu_flags(config)
    if config.vertex is not None:
        vertex = config.vertex
        log.info("Vertex AI (AIP_MODE=PREDICTION): port %d (AIP_HTTP_PORT), POST %s%s", vertex.port,
                 vertex.predict_route, f", health also on GET {vertex.health_route}" if vertex.health_route else "")
    raise_open_files_limit()
    failure: list[str] = []
    server: uvicorn.Server | None = None

    def on_failure(message: str) -> None:
        failure.append(message)
        if server is not None:
            server.should_exit = True

    try:
        state = open_state(config.state_url)
    except StateUnavailable as exc:
        print(f"mlxcel: error: {exc}", file=sys.stderr)
        return 1
    try:
        sockets = open_listeners(config.hosts, config.port, config.reuse_port)
        if config.metrics_port is not None:  # --metrics-port: the TCP addresses again, on that port
            tcp_hosts = [host for host in config.hosts if not host.endswith(".sock")] or ["127.0.0.1"]
            try:
                sockets += open_listeners(tcp_hosts, config.metrics_port, config.reuse_port)
            except ListenError:
                for sock in sockets:
                    sock.close()
                raise
    except ListenError as exc:
        print(f"mlxcel: error: {exc}", file=sys.stderr)
        state.close()
        return 1
    app = create_app(config, on_failure, fleet, state)
    uv_config = uvicorn.Config(
        app,
        log_config=None,  # uvicorn's own lines go through the server's handlers (--log-* apply to them)
        log_level="debug" if config.verbose else "warning",
        access_log=config.verbose,
        timeout_graceful_shutdown=GRACE_S,
        http=guarded_protocol(config.timeout_s),
        ssl_keyfile=config.tls.key_file if config.tls else None,
        ssl_certfile=config.tls.cert_file if config.tls else None,
    )
    server = _Server(uv_config, app.state.fleet, app.state.end_requests)
    where = ", ".join(describe(sock, tls=config.tls is not None) for sock in sockets)
    served = f"models of {config.model}" if fleet is not None else f"model {config.model}"
    log.info("mlxcel listening on %s (%s; state: %s)", where, served, state.description)
    try:
        server.run(sockets=sockets)
    except KeyboardInterrupt:
        # uvicorn shuts down gracefully on SIGINT, then raises the signal again for its
        # default action; that interrupt is the end of a clean stop, not a failure
        pass
    finally:
        for sock in sockets:
            unix_path = sock.getsockname() if sock.family == socket.AF_UNIX else None
            sock.close()
            if unix_path:
                with contextlib.suppress(OSError):
                    os.unlink(unix_path)
    if failure:
        print(f"mlxcel: error: {failure[0]}", file=sys.stderr)
        return _leave(1)
    return _leave(0)
