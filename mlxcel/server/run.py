"""Starting uvicorn on a ServerConfig."""

from __future__ import annotations

import logging
import sys

import uvicorn

from mlxcel.config import ServerConfig
from mlxcel.server.app import create_app

log = logging.getLogger("mlxcel")


def _configure_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def run_server(config: ServerConfig) -> int:
    _configure_logging(config.verbose)
    if config.ignored_flags:
        log.warning(
            "accepted and ignored llama-server flags (not applicable to mlxcel): %s", " ".join(config.ignored_flags)
        )
    failure: list[str] = []
    server: uvicorn.Server | None = None

    def on_failure(message: str) -> None:
        failure.append(message)
        if server is not None:
            server.should_exit = True

    app = create_app(config, on_failure)
    uv_config = uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        log_level="debug" if config.verbose else "warning",
        access_log=config.verbose,
        timeout_graceful_shutdown=3,
    )
    server = uvicorn.Server(uv_config)
    log.info("mlxcel listening on http://%s:%d (model %s)", config.host, config.port, config.model)
    server.run()
    if failure:
        print(f"mlxcel: error: {failure[0]}", file=sys.stderr)
        return 1
    return 0
