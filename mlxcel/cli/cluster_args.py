"""`serve` flags of the replicated mode (mlxcel.cluster): --replicas N runs N engine
replicas on Ray Serve behind one endpoint; --ray-address joins a Ray cluster."""

from __future__ import annotations

import argparse
import os

from mlxcel.cli.arg_types import ranged
from mlxcel.config import ClusterSettings

ROUTERS = ("prefix", "round-robin")


class ClusterUsageError(ValueError):
    pass


def _router(value: str) -> str:
    if value not in ROUTERS:
        raise argparse.ArgumentTypeError(f"must be one of: {', '.join(ROUTERS)}")
    return value


# (flags, dest, type, default, env, help): the shape of serve_args' value options
CLUSTER_OPTIONS = [
    (("--replicas",), "replicas", ranged(int, 0, 256), 0, "MLXCEL_REPLICAS",
     ("engine replicas on Ray Serve behind one endpoint (0: one process, no Ray); each has its own llama "
      "context and -t threads (default: this machine's cores / replicas)")),
    (("--ray-address",), "ray_address", str, None, "MLXCEL_RAY_ADDRESS",
     ("join this Ray cluster (host:port of its head, or 'auto') instead of starting one; implies --replicas 1 "
      "when --replicas is not given")),
    (("--router",), "router", _router, "prefix", "MLXCEL_ROUTER",
     ("how requests pick a replica: prefix (the one holding the longest prefix of the prompt, else the least "
      "loaded) or round-robin")),
    (("--min-replicas",), "min_replicas", ranged(int, 0, 256), None, "MLXCEL_MIN_REPLICAS",
     "with --max-replicas: scale replicas by queue depth between the two"),
    (("--max-replicas",), "max_replicas", ranged(int, 1, 256), None, "MLXCEL_MAX_REPLICAS",
     "with --min-replicas: scale replicas by queue depth between the two"),
    (("--ray-cpus",), "ray_cpus", ranged(int, 1, 4096), None, "MLXCEL_RAY_CPUS",
     "CPUs the Ray instance started here offers (default: all cores)"),
]


def cluster_settings(args: argparse.Namespace) -> ClusterSettings | None:
    """None for a single-process server; a ClusterUsageError for contradictory flags."""
    scaling = args.min_replicas is not None or args.max_replicas is not None
    if not (args.replicas or args.ray_address or scaling):
        return None
    if (args.min_replicas is None) != (args.max_replicas is None):
        raise ClusterUsageError("--min-replicas and --max-replicas go together")
    if scaling and args.min_replicas > args.max_replicas:
        raise ClusterUsageError("--min-replicas must not exceed --max-replicas")
    if args.models_dir is not None or args.models_preset is not None:
        raise ClusterUsageError("--replicas serves one model (-m): --models-dir and --models-preset are "
                                "single-process only")
    if args.config_file is not None:
        raise ClusterUsageError("--replicas serves one model (-m): --config is single-process only")
    replicas = args.replicas or (args.min_replicas if scaling else 1)
    return ClusterSettings(replicas=max(1, replicas), ray_address=args.ray_address, router=args.router,
                           min_replicas=args.min_replicas, max_replicas=args.max_replicas, ray_cpus=args.ray_cpus)


def replica_threads(args: argparse.Namespace, settings: ClusterSettings | None) -> int | None:
    """Threads per replica when -t is not given: the cores shared out, so replicas on
    one host do not oversubscribe it."""
    if settings is None or args.threads:
        return args.threads
    cores = settings.ray_cpus or os.cpu_count() or 1
    return max(1, cores // max(1, settings.max_replicas or settings.replicas))
