"""The ``pull``, ``list`` and ``convert-bert`` subcommands of the mlxcel command line."""

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

    convert = subparsers.add_parser(
        "convert-bert", help="convert a BERT-family safetensors checkpoint to GGUF (embeddings or reranking)")
    convert.add_argument("source", help="folder with config.json, model.safetensors and tokenizer.json or vocab.txt")
    convert.add_argument("output", help="the .gguf file to write")
    convert.add_argument("--outtype", choices=("f16", "f32"), default="f16", help="weight type (default f16)")
    convert.add_argument("--pooling", choices=("mean", "cls", "last", "none", "rank"), default=None,
                         help="pooling written into the GGUF (default: the checkpoint's)")
    convert.set_defaults(func=cmd_convert_bert)


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


def cmd_convert_bert(args: argparse.Namespace) -> int:
    from pathlib import Path

    from mlxcel.models.bert_gguf import convert_bert

    try:
        result = convert_bert(Path(args.source), Path(args.output), outtype=args.outtype, pooling=args.pooling)
    except (PullError, ValueError, OSError, KeyError) as exc:
        _error(exc)
        return 1
    print(f"wrote {result.path}")
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


def cache_listing() -> str:
    """llama-server's --cache-list, of the models `mlxcel pull` fetched."""
    pulled = [row for row in list_models() if row["pulled"]]
    lines = [f"number of models in cache: {len(pulled)}"]
    lines += [f"{i:4d}. {row['name']} ({row['path']})" for i, row in enumerate(pulled, 1)]
    return "\n".join(lines)


def cmd_list(args: argparse.Namespace) -> int:
    """Print the catalog table; 0 on success, 1 on error."""
    try:
        print(format_table(list_models()))
    except OSError as exc:
        _error(exc)
        return 1
    return 0
