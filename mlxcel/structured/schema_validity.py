"""Whether a tool's parameters are a JSON schema at all.

A schema the grammar engine cannot express (`not`, an unknown `format`, a look-around
in a `pattern`), or one beyond the structured-output limits (limits.py), is still a
schema: its tool is rendered, and a forced call gets the instruction only. One that
breaks JSON Schema itself (`"type": "bogus"`, `"required": "a"`) is the request's
error, a 400 as OpenAI and Anthropic answer it. llguidance judges first (a fraction of
a millisecond); only a schema it refuses is checked against JSON Schema's meta-schema
(milliseconds), and verdicts are kept by the schema's text, since agents send the same
tools every turn.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from llguidance import LLMatcher

from mlxcel.structured.errors import SchemaLimitError, schema_free_reason
from mlxcel.structured.limits import check_schema

VERDICTS_KEPT = 1024
MAX_MESSAGE = 300


def schema_problem(schema: dict[str, Any]) -> str | None:
    """Why `schema` is not a JSON schema (the meta-schema's complaint and where), or None."""
    try:
        text = json.dumps(schema, sort_keys=True, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return "it is not JSON"
    return _problem(text)


@functools.lru_cache(maxsize=VERDICTS_KEPT)
def _problem(text: str) -> str | None:
    try:
        check_schema(text)  # beyond the limits no grammar is built from it: it is served, unconstrained
    except SchemaLimitError:
        return None
    failed, _ = LLMatcher.validate_grammar_with_warnings(LLMatcher.grammar_from_json_schema(text))
    if not failed:
        return None
    schema = json.loads(text)
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import Draft202012Validator, validator_for

    validator = validator_for(schema, default=Draft202012Validator)  # an older "$schema" is read as its draft
    try:
        validator.check_schema(schema)
    except SchemaError as exc:  # its message and path quote the schema, which no error echoes (spec 001)
        where = schema_free_reason("/".join(str(part) for part in exc.path), schema)
        message = schema_free_reason(exc.message, schema)
        message = message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE] + "..."
        return f"{message} (at {where})" if where else message
    return None
