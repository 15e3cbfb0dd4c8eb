"""Structured output: JSON-schema constrained decoding through llguidance.

HTTP side: `request_grammar(grammar, json_schema, response_format)` (or
`ResponseFormat.parse(body).grammar_spec()`) → `compile_constraint(spec,
grammar_tokenizer(tokenizer))` (a 400 on any StructuredOutputError). GBNF grammars
go through llguidance's own GBNF front-end. Engine side: a
`BatchMasker` fills the masks of a step's constrained slots, `apply_mask` writes them
into the logits before sampling, `Constraint.accept` takes the sampled token.
"""

from mlxcel.structured.constraint import BatchMasker, Constraint, apply_mask, logits_row, mask_words
from mlxcel.structured.errors import (
    ConflictingConstraintsError,
    GrammarError,
    GrammarTimeoutError,
    ResponseFormatError,
    SchemaError,
    SchemaLimitError,
    StructuredOutputError,
    UnsupportedTokenizerError,
)
from mlxcel.structured.grammar import (
    GrammarLimits,
    GrammarSpec,
    ResponseFormat,
    compile_constraint,
    compile_constraint_async,
    gbnf_grammar,
    json_schema_grammar,
)
from mlxcel.structured.limits import check_schema
from mlxcel.structured.request_grammar import request_grammar
from mlxcel.structured.tokenizer import build_lltokenizer, grammar_tokenizer

__all__ = [
    "BatchMasker",
    "ConflictingConstraintsError",
    "Constraint",
    "GrammarError",
    "GrammarLimits",
    "GrammarSpec",
    "GrammarTimeoutError",
    "ResponseFormat",
    "ResponseFormatError",
    "SchemaError",
    "SchemaLimitError",
    "StructuredOutputError",
    "UnsupportedTokenizerError",
    "apply_mask",
    "build_lltokenizer",
    "check_schema",
    "compile_constraint",
    "compile_constraint_async",
    "gbnf_grammar",
    "grammar_tokenizer",
    "json_schema_grammar",
    "logits_row",
    "mask_words",
    "request_grammar",
]
