"""Which grammar a request asks for, from llama-server's three fields: `grammar`
(GBNF), `json_schema` and `response_format`.

As in llama-server: an empty `grammar` is none; an absent or empty schema means any
object; `response_format` is read as its chat route reads it (`json_object`, with or
without a `schema`, and `json_schema` with `json_schema.schema`), and a plain
`json_object` leaves a `json_schema` field in force. A grammar with a schema is
refused: llama-server refuses the pair on chat and lets one silently win elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlxcel.structured.errors import ConflictingConstraintsError, GrammarError
from mlxcel.structured.grammar import GrammarSpec, ResponseFormat, gbnf_grammar


def request_grammar(
    grammar: Any = None, json_schema: Any = None, response_format: Mapping[str, Any] | None = None
) -> GrammarSpec | None:
    """The grammar to compile, or None for free text. Raises a StructuredOutputError
    (a 400) for a malformed field, an oversized schema or grammar, or a conflict."""
    if grammar is not None and not isinstance(grammar, str):
        raise GrammarError("grammar must be a string")
    fmt = ResponseFormat.parse(response_format)
    schema = ResponseFormat.from_schema(json_schema) if json_schema is not None else None
    if grammar:
        if schema is not None or fmt.constrained:
            raise ConflictingConstraintsError()
        return gbnf_grammar(grammar)
    if schema is not None and (not fmt.constrained or _plain_json_object(response_format)):
        return schema.grammar_spec()
    return fmt.grammar_spec()


def _plain_json_object(response_format: Mapping[str, Any] | None) -> bool:
    return response_format is not None and response_format.get("type") == "json_object" \
        and response_format.get("schema") is None
