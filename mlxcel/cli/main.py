"""The `mlxcel` command: serve, pull, list."""

from __future__ import annotations

import argparse
import os
import sys

from mlxcel import __version__
from mlxcel.cli.serve_args import parse_serve_args
from mlxcel.cli.usage import UsageError


def _top_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    parser = argparse.ArgumentParser(prog="mlxcel", description="Local LLM inference server for GGUF models.")
    parser.add_argument("--version", action="version", version=f"mlxcel {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("serve", help="serve a model over HTTP (see `mlxcel serve --help`)", add_help=False)
    try:
        from mlxcel.cli.model_commands import add_model_commands
    except ImportError:  # pragma: no cover - during partial installs
        pass
    else:
        add_model_commands(commands)
    return parser, commands


def _asked(argv: list[str], *flags: str) -> bool:
    """Whether the command line holds one of these flags (a long one may be spelled with
    underscores, as llama-server reads it)."""
    return any((arg.replace("_", "-") if arg.startswith("--") else arg) in flags for arg in argv)


def serve(argv: list[str], prog: str) -> int:
    # llama-server's flags that print something and exit, whatever else the line holds
    if _asked(argv, "--list-devices"):
        from mlxcel.engine.devices import device_listing

        print(device_listing())
        return 0
    if _asked(argv, "--completion-bash"):
        from mlxcel.cli.completion import bash_completion

        print(bash_completion(prog))
        return 0
    if _asked(argv, "-cl", "--cache-list"):
        from mlxcel.cli.model_commands import cache_listing

        print(cache_listing())
        return 0
    fleet = None
    try:
        config = parse_serve_args(argv, prog=prog)
        if config.config_file is not None or config.models_dir is not None or config.models_preset is not None:
            from mlxcel.cli.fleet_args import fleet_settings

            config, fleet = fleet_settings(config)
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    if config.offline:  # every model resolved from now on, in this process and its replicas
        from mlxcel.models.pull import OFFLINE_ENV

        os.environ[OFFLINE_ENV] = "1"
    if config.cluster is not None:
        from mlxcel.cluster.launch import run_cluster

        return run_cluster(config)
    from mlxcel.server.run import run_server

    return run_server(config, fleet)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "serve":
        return serve(argv[1:], "mlxcel serve")
    parser, _ = _top_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return int(args.func(args) or 0)


def server_main() -> int:
    """`mlxcel-server`: llama-server's command line, served by mlxcel."""
    return serve(sys.argv[1:], "mlxcel-server")


if __name__ == "__main__":
    raise SystemExit(main())
