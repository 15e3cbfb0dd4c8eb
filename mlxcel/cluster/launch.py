"""`mlxcel serve --replicas N`: start (or join) Ray, deploy the engine replicas and
the gateway on Ray Serve, serve until SIGINT/SIGTERM, then take them down."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading

from mlxcel.cluster.stopping import abandon_ray_start, arm_stop_deadline, ignore_stop_signals, interrupt_on_sigterm
from mlxcel.config import ClusterSettings, ServerConfig
from mlxcel.observability.log_setup import configure_logging

log = logging.getLogger("mlxcel")
ROUTING_STATS_PERIOD_S = 0.5
APP_NAME = "mlxcel"
STOP_TIMEOUT_S = 30
# Ray Serve settings measured here (bench/README.md, "Replicas on Ray Serve"): our code
# on the replica's own event loop (each streamed part otherwise crosses between two
# loops), and the controller's loop at 2 Hz rather than 10 (it cost 3 % of a core idle).
# A value already in the environment wins.
RAY_SERVE_ENV = {"RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0", "RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "0.5"}


def _serve_env() -> dict[str, str]:
    return {name: os.environ.get(name, value) for name, value in RAY_SERVE_ENV.items()}


def _deployments(config: ServerConfig, settings: ClusterSettings, node_ip: str):
    from ray import serve
    from ray.serve.config import RequestRouterConfig

    from mlxcel.cluster.gateway import Gateway
    from mlxcel.cluster.replica import EngineReplica
    from mlxcel.cluster.router import PrefixRouter

    scaling = {}
    if settings.min_replicas is not None and settings.max_replicas is not None:
        scaling = {"autoscaling_config": {
            "min_replicas": settings.min_replicas, "max_replicas": settings.max_replicas,
            "initial_replicas": max(settings.min_replicas, 1),
            # a replica's slots all busy is its target; a queue beyond them scales up
            "target_ongoing_requests": config.parallel, "upscale_delay_s": 5, "downscale_delay_s": 60}}
    else:
        scaling = {"num_replicas": settings.replicas}
    engine = serve.deployment(
        EngineReplica, name="engine",
        # the env reaches replicas on nodes this process did not start too
        ray_actor_options={"num_cpus": config.threads, "runtime_env": {"env_vars": _serve_env()}},
        max_ongoing_requests=config.parallel + config.queue_cap + 8,  # the replica's own queue answers past it
        max_queued_requests=-1,
        health_check_period_s=2, health_check_timeout_s=30, graceful_shutdown_timeout_s=5,
        request_router_config=RequestRouterConfig(
            request_router_class=PrefixRouter, request_router_kwargs={"mode": settings.router},
            request_routing_stats_period_s=ROUTING_STATS_PERIOD_S, request_routing_stats_timeout_s=5),
        **scaling,
    )
    # the gateway serves the endpoint itself, so it runs on this (the driver's) node
    gateway = Gateway.options(name="gateway", num_replicas=1, max_ongoing_requests=100_000,
                              ray_actor_options={"num_cpus": 0, "resources": {f"node:{node_ip}": 0.001},
                                                 "runtime_env": {"env_vars": _serve_env()}})
    return gateway.bind(engine.bind(config), config.max_body_bytes, config.api_prefix, config.hosts, config.port,
                        config.timeout_s, config.tls, config.parallel)


def run_cluster(config: ServerConfig) -> int:
    settings = config.cluster
    configure_logging(config.log, config.verbose)
    if config.ignored_flags:
        log.warning("accepted and ignored llama-server flags (not applicable to mlxcel): %s",
                    " ".join(config.ignored_flags))
    try:
        import ray
        from ray import serve
    except ImportError:
        print("mlxcel: error: --replicas needs Ray Serve: pip install 'mlxcel[cluster]'", file=sys.stderr)
        return 1
    if (busy := _unlistenable(config)) is not None:
        print(f"mlxcel: error: {busy}", file=sys.stderr)
        return 1
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.update(_serve_env())  # a Ray instance started here (its controller) inherits them
    local = settings.ray_address is None and "RAY_ADDRESS" not in os.environ
    # "local": a Ray instance of our own, even where `ray start` left a cluster behind
    init = ({"address": "local", "num_cpus": settings.ray_cpus or os.cpu_count() or 1} if local
            else {"address": settings.ray_address})
    interrupt_on_sigterm()
    try:
        ray.init(include_dashboard=False, log_to_driver=config.verbose, logging_level=logging.WARNING,
                 **init)
    except (KeyboardInterrupt, SystemExit):  # SystemExit: Ray's own SIGTERM handler, set in ray.init
        abandon_ray_start(ray)
        return 130
    interrupt_on_sigterm()
    try:
        # no Ray HTTP proxy: the gateway listens on the endpoint's addresses itself
        serve.start(proxy_location="Disabled", logging_config={"log_level": "WARNING"})
        serve.run(_deployments(config, settings, ray.util.get_node_ip_address()), name=APP_NAME,
                  route_prefix=None, blocking=False)
    except (KeyboardInterrupt, SystemExit):
        log.info("stopped while starting")
        ignore_stop_signals()
        _stop(ray, serve, local, exit_code=130)
        return 130
    except Exception as exc:  # noqa: BLE001 - a replica that cannot load fails the deploy
        print(f"mlxcel: error: the replicas did not start: {_deploy_failure(serve) or exc}", file=sys.stderr)
        _stop(ray, serve, local, exit_code=1)
        return 1
    where = "a local Ray instance" if local else f"the Ray cluster at {settings.ray_address or os.environ['RAY_ADDRESS']}"
    stop = threading.Event()
    try:
        log.info("mlxcel listening on %s port %d%s (model %s, %d replica(s) of %d threads on %s, %s routing)",
                 ", ".join(config.hosts), config.port, " (HTTPS)" if config.tls else "", config.model,
                 settings.replicas, config.threads, where, settings.router)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        stop.wait()
    except KeyboardInterrupt:  # a signal that came before the handlers above: a stop all the same
        pass
    _stop(ray, serve, local, exit_code=0)
    return 0


def _unlistenable(config: ServerConfig) -> str | None:
    """Why the endpoint's addresses cannot be listened on (a port in use), found before
    Ray starts; the gateway binds them again on this node once deployed."""
    from mlxcel.server.listeners import ListenError, open_listeners

    try:
        sockets = open_listeners(config.hosts, config.port, config.reuse_port)
    except ListenError as exc:
        return str(exc)
    for sock in sockets:
        if sock.family == socket.AF_UNIX:
            os.unlink(sock.getsockname())
        sock.close()
    return None


def _deploy_failure(serve) -> str | None:
    """The replicas' own reason (the last line Ray kept of their constructor's error)."""
    try:
        deployment = serve.status().applications[APP_NAME].deployments["engine"]
    except Exception:  # noqa: BLE001 - no status to read: the caller says what it has
        return None
    reasons = [line.strip() for line in (deployment.message or "").splitlines() if "RuntimeError: replica" in line]
    return reasons[-1].split("RuntimeError: ", 1)[1] if reasons else None


def _stop(ray, serve, local: bool, exit_code: int) -> None:
    """A Ray instance of our own goes whole (its replicas with it); on a shared cluster
    only our application is deleted, waiting at most STOP_TIMEOUT_S for it. Either way
    the process exits with `exit_code` within the stop deadline (stopping.py)."""
    arm_stop_deadline(exit_code)
    if not local:
        deleting = threading.Thread(target=serve.delete, args=(APP_NAME,), daemon=True)
        deleting.start()
        deleting.join(STOP_TIMEOUT_S)
    ray.shutdown()
