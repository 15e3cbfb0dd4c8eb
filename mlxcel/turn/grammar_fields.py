"""llama-server's output-constraint fields, `grammar` (GBNF) and `json_schema`, for
the routes that take them (/completion, /v1/completions, chat). Its `grammar_lazy` (a
grammar that holds only once one of `grammar_triggers` appears) is refused rather than
run as a grammar from the first token."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, StrictBool, field_validator

from mlxcel.structured import GrammarSpec, request_grammar


class GrammarFields(BaseModel):
    grammar: str | None = None
    json_schema: dict[str, Any] | None = None
    grammar_lazy: StrictBool = False

    @field_validator("grammar_lazy")
    @classmethod
    def _not_lazy(cls, lazy: bool) -> bool:
        if lazy:
            raise ValueError("a lazy grammar (applied once a trigger appears) is not supported: send the grammar "
                             "without grammar_lazy to constrain the whole output")
        return lazy

    def output_grammar(self, response_format: dict[str, Any] | None = None) -> GrammarSpec | None:
        """The grammar these fields (and the route's response_format) ask for; raises a
        StructuredOutputError (a 400) for a bad or conflicting one."""
        return request_grammar(self.grammar, self.json_schema, response_format)
