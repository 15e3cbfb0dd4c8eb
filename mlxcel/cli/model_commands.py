"""The ``pull`` and ``list`` subcommands of the mlxcel command line."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mlxcel.models.pull import PullError, list_models, pull

EXIT_INTERRUPTED = 130


def add_model_commands(subparsers: Any) -> None:
    """Register ``pull NAME [--force]`` and ``list`` on an argparse subparsers object."""
    pull_parser = subparsers.add_parser("pull", help="download and verify a catalog model")
    pull_parser.add_argument("name", help="catalog name, e.g. smollm2-135m-instruct")
    pull_parser.add_argument(
        "--force", action="store_true", help="fetch again even if already stored and intact"
    )
    pull_parser.set_defaults(func=cmd_pull)

    list_parser = subparsers.add_parser("list", help="list catalog models and which are pulled")
    list_parser.set_defaults(func=cmd_list)


def _error(message: object) -> None:
    print(f"mlxcel: error: {message}", file=sys.stderr)


def cmd_pull(args: argparse.Namespace) -> int:
    """Pull ``args.name``; 0 on success, 1 on error, 130 if interrupted."""
    try:
        pull(args.name, force=args.force)
    except (PullError, OSError) as exc:
        _error(exc)
        return 1
    except KeyboardInterrupt:
        _error("interrupted")
        return EXIT_INTERRUPTED
    return 0


def format_table(rows: list[dict[str, object]]) -> str:
    """Rows of list_models() as an aligned table: name, size in MB, pulled, kind, description."""
    header = ("NAME", "SIZE (MB)", "PULLED", "KIND", "DESCRIPTION")
    body = [
        (
            str(row["name"]),
            f"{int(row['size']) / 1e6:.1f}",  # type: ignore[call-overload]
            "yes" if row["pulled"] else "no",
            str(row.get("kind", "chat")),
            str(row["description"]),
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in (header, *body)) for i in range(4)]
    lines = []
    for name, size, pulled, kind, description in (header, *body):
        lines.append(
            f"{name:<{widths[0]}}  {size:>{widths[1]}}  {pulled:<{widths[2]}}  "
            f"{kind:<{widths[3]}}  {description}"
        )
    return "\n".join(lines)


def cmd_list(args: argparse.Namespace) -> int:
    """Print the catalog table; 0 on success, 1 on error."""
    try:
        print(format_table(list_models()))
    except OSError as exc:
        _error(exc)
        return 1
    return 0
