"""Output constraints on the HTTP side (response_format, llama-server's grammar and
json_schema): parsed, checked and compiled off the event loop into the Constraint an
engine request carries.

The grammar tokenizer (llguidance's view of the vocabulary: ~65 MB and ~0.8 s on a
152k vocabulary) is built on the first constrained request, on a worker thread, so a
server that never constrains output never holds it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from mlxcel.engine.tokenizer import Tokenizer
from mlxcel.structured import (
    GrammarSpec,
    ResponseFormat,
    StructuredOutputError,
    compile_constraint,
    compile_constraint_async,
    grammar_tokenizer,
    request_grammar,
)


async def compile_response_format(tokenizer: Tokenizer, response_format: dict[str, Any] | None):
    """A fresh Constraint for one generation, or None for unconstrained text. Raises a
    StructuredOutputError (a 400) for a bad format or a schema that cannot compile."""
    return await compile_grammar(tokenizer, ResponseFormat.parse(response_format).grammar_spec())


async def compile_grammar(tokenizer: Tokenizer, spec: GrammarSpec | None):
    """A fresh Constraint for one generation from a checked grammar, or None. Raises a
    StructuredOutputError (a 400) when it does not compile."""
    if spec is None:
        return None
    return await compile_constraint_async(spec, await _grammar_tokenizer(tokenizer))


def server_grammar(source: tuple[str, str] | None, tokenizer: Tokenizer) -> GrammarSpec | None:
    """The server's default grammar (--grammar, --json-schema) for this model, compiled
    once here so that one that cannot compile fails the load; None without one."""
    if source is None:
        return None
    kind, text = source
    try:
        spec = request_grammar(grammar=text) if kind == "gbnf" else request_grammar(json_schema=json.loads(text))
        if spec is not None:
            compile_constraint(spec, grammar_tokenizer(tokenizer))
    except StructuredOutputError as exc:
        raise ValueError(f"the server's default grammar (--grammar / --json-schema): {exc}") from None
    return spec


def with_server_grammar(own: GrammarSpec | None, fields: tuple, server: GrammarSpec | None) -> GrammarSpec | None:
    """A request's grammar, or the server's when the request set none of its grammar
    fields (`fields`: its grammar, json_schema and response_format), as in llama-server,
    where a field given empty still replaces the default."""
    if own is not None or any(field is not None for field in fields):
        return own
    return server


async def _grammar_tokenizer(tokenizer: Tokenizer):
    """The model's grammar tokenizer, built off the event loop the first time."""
    return await asyncio.to_thread(grammar_tokenizer, tokenizer)


async def compile_forced_tool_call(tokenizer: Tokenizer, call_grammar: dict[str, Any]):
    """The Constraint that makes a forced tool_choice produce its call."""
    from mlxcel.structured.tool_call_grammar import tool_call_grammar

    spec = tool_call_grammar(tokenizer, call_grammar["prefix"], call_grammar["schema"], call_grammar["suffix"])
    return await compile_constraint_async(spec, await _grammar_tokenizer(tokenizer))
