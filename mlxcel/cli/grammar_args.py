"""`serve` flags that constrain every generation by default, as llama-server's:
--grammar / --grammar-file (GBNF) and -j / --json-schema / -jf / --json-schema-file.
The last one given wins; a request's own grammar, json_schema or response_format
replaces it. The text is checked here (size, JSON); the grammar compiles when the
model is loaded, so a broken one fails the start."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mlxcel.structured import StructuredOutputError, request_grammar


class GrammarUsageError(ValueError):
    pass


def _read(path: str) -> str:
    try:
        return Path(path).expanduser().read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise argparse.ArgumentTypeError(f"cannot read {path}: {reason}") from None


def _gbnf(text: str) -> tuple[str, str]:
    return ("gbnf", text)


def _gbnf_file(path: str) -> tuple[str, str]:
    return ("gbnf", _read(path))


def _schema(text: str) -> tuple[str, str]:
    return ("json_schema", text)


def _schema_file(path: str) -> tuple[str, str]:
    return ("json_schema", _read(path))


_FLAGS = [
    (("--grammar",), _gbnf, "GBNF grammar every generation follows unless the request brings its own"),
    (("--grammar-file",), _gbnf_file, "file holding the --grammar"),
    (("-j", "--json-schema"), _schema, "JSON schema every generation follows unless the request brings its own"),
    (("-jf", "--json-schema-file"), _schema_file, "file holding the --json-schema"),
]
GRAMMAR_FLAGS = {flag for flags, _, _ in _FLAGS for flag in flags}


def add_grammar_options(parser: argparse.ArgumentParser) -> None:
    for flags, kind, help_text in _FLAGS:
        parser.add_argument(*flags, dest="default_grammar", type=kind, default=None, help=help_text)


def default_grammar(args: argparse.Namespace) -> tuple[str, str] | None:
    """(kind, text) of the server's default grammar, checked as a request's would be."""
    source = args.default_grammar
    if source is None:
        return None
    kind, text = source
    try:
        if kind == "gbnf":
            request_grammar(grammar=text)
            return source if text.strip() else None
        try:
            schema = json.loads(text)
        except (ValueError, RecursionError) as exc:
            reason = "nested too deeply" if isinstance(exc, RecursionError) else exc
            raise GrammarUsageError(f"--json-schema: not JSON: {reason}") from None
        request_grammar(json_schema=schema)
    except StructuredOutputError as exc:
        raise GrammarUsageError(f"the server's default grammar: {exc}") from None
    return source
