"""A grammar forcing one tool call in a JSON-wrapper format: the format's prefix,
a JSON object matching the call schema, the suffix. Marker tokens of the prefix and
suffix (`<tool_call>`, `<|python_tag|>` ...) are matched as the single tokens the
model emits, not spelt out byte by byte."""

from __future__ import annotations

import json
from typing import Any

from mlxcel.engine.tokenizer import Tokenizer
from mlxcel.structured.grammar import JSON_WHITESPACE, TOOL_CALL_SCHEMA_MARK, GrammarSpec
from mlxcel.structured.limits import check_schema


def _lark_sequence(tokenizer: Tokenizer, text: str) -> str:
    """`text` as Lark items: `<[id]>` for marker tokens, quoted strings for the rest."""
    items: list[str] = []
    pending = b""
    for token in tokenizer.encode(text, add_special=False, parse_special=True) if text else []:
        if tokenizer.is_marker(token):
            if pending:
                items.append(json.dumps(pending.decode("utf-8", "replace")))
                pending = b""
            items.append(f"<[{token}]>")
        else:
            pending += tokenizer.special_piece(token)
    if pending:
        items.append(json.dumps(pending.decode("utf-8", "replace")))
    return " ".join(items)


def tool_call_grammar(tokenizer: Tokenizer, prefix: str, schema: dict[str, Any], suffix: str) -> GrammarSpec:
    check_schema(schema)
    body = {**schema, "x-guidance": {"whitespace_flexible": True, "whitespace_pattern": JSON_WHITESPACE}}
    parts = [p for p in (_lark_sequence(tokenizer, prefix), "call", _lark_sequence(tokenizer, suffix)) if p]
    lark = f"start: {' '.join(parts)}\ncall: {TOOL_CALL_SCHEMA_MARK}{json.dumps(body)}\n"
    return GrammarSpec("tool_call", lark)
