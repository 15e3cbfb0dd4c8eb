"""llama-server's output-constraint fields, `grammar` (GBNF) and `json_schema`, for
the routes that take them (/completion, /v1/completions, chat)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from mlxcel.structured import GrammarSpec, request_grammar


class GrammarFields(BaseModel):
    grammar: str | None = None
    json_schema: dict[str, Any] | None = None

    def output_grammar(self, response_format: dict[str, Any] | None = None) -> GrammarSpec | None:
        """The grammar these fields (and the route's response_format) ask for; raises a
        StructuredOutputError (a 400) for a bad or conflicting one."""
        return request_grammar(self.grammar, self.json_schema, response_format)
