"""Output constraints on the HTTP side (response_format, llama-server's grammar and
json_schema): parsed, checked and compiled off the event loop into the Constraint an
engine request carries.

The grammar tokenizer (llguidance's view of the vocabulary: ~65 MB and ~0.8 s on a
152k vocabulary) is built on the first constrained request, on a worker thread, so a
server that never constrains output never holds it."""

from __future__ import annotations

import asyncio
from typing import Any

from mlxcel.engine.tokenizer import Tokenizer
from mlxcel.structured import GrammarSpec, ResponseFormat, compile_constraint_async, grammar_tokenizer


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


async def _grammar_tokenizer(tokenizer: Tokenizer):
    """The model's grammar tokenizer, built off the event loop the first time."""
    return await asyncio.to_thread(grammar_tokenizer, tokenizer)


async def compile_forced_tool_call(tokenizer: Tokenizer, call_grammar: dict[str, Any]):
    """The Constraint that makes a forced tool_choice produce its call."""
    from mlxcel.structured.tool_call_grammar import tool_call_grammar

    spec = tool_call_grammar(tokenizer, call_grammar["prefix"], call_grammar["schema"], call_grammar["suffix"])
    return await compile_constraint_async(spec, await _grammar_tokenizer(tokenizer))
