"""The errors of the structured-output layer. All of them are the caller's fault (an
HTTP 400), and none of their messages repeat the schema."""

from __future__ import annotations

import json
import re
from typing import Any

MAX_REASON_CHARS = 200

# JSON Schema's own words (and the keys of llguidance's grammar object around a
# schema): an error may name them, as they say nothing of the client's schema.
SCHEMA_VOCABULARY = frozenset({
    "$anchor", "$comment", "$defs", "$id", "$ref", "$schema", "additionalItems", "additionalProperties",
    "allOf", "anyOf", "array", "boolean", "const", "contains", "contentEncoding", "contentMediaType", "default",
    "definitions", "dependencies", "dependentRequired", "dependentSchemas", "deprecated", "description", "else",
    "enum", "examples", "exclusiveMaximum", "exclusiveMinimum", "format", "if", "integer", "items", "maxContains",
    "maxItems", "maxLength", "maxProperties", "maximum", "minContains", "minItems", "minLength", "minProperties",
    "minimum", "multipleOf", "not", "null", "number", "object", "oneOf", "pattern", "patternProperties",
    "prefixItems", "properties", "propertyNames", "readOnly", "required", "string", "then", "title", "type",
    "unevaluatedItems", "unevaluatedProperties", "uniqueItems", "writeOnly",
    "grammars", "json_schema", "lark_grammar", "lenient", "max_tokens", "name", "whitespace_flexible",
    "whitespace_pattern", "x-guidance",
})
REDACTED = "…"


# llguidance's names for conditions, as a client reads them
_ENGINE_TERMS = {
    "NoExtensionBias": "nothing can be generated: it allows no finite value (a rule or $ref that only "
                       "refers back to itself, for example)",
}


def one_line_reason(message: str) -> str:
    """llguidance's message as one line, without its debug marker, its internal names
    put in words, short enough not to carry the schema."""
    text = " ".join(message.replace("<non-verbose/>", " ").split())
    text = _ENGINE_TERMS.get(text, text)
    if len(text) > MAX_REASON_CHARS:
        text = text[: MAX_REASON_CHARS - 3] + "..."
    return text or "rejected by the grammar compiler"


def schema_strings(schema: Any) -> set[str]:
    """Every string a schema holds, keys and values (property names, patterns, $refs,
    enum values, formats ...), but JSON Schema's own words."""
    found: set[str] = set()
    pending = [schema]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            found.update(key for key in item if isinstance(key, str))
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str):
            found.add(item)
    return {text for text in found if len(text) > 1 and text not in SCHEMA_VOCABULARY}


def schema_free_reason(message: str, schema: Any) -> str:
    """llguidance's reason for refusing `schema` with nothing of the schema in it, as the
    spec promises: a regex error keeps its verdict but not the pattern it quotes, and
    each of the schema's strings (as written, JSON-escaped, or a $ref's fragment; in any
    case) reads as an ellipsis."""
    head, marker, tail = message.partition("regex parse error:")
    if marker:
        message = f"{head}{marker} {tail.rsplit('error:', 1)[-1].strip()}"
    forms: set[str] = set()
    for text in schema_strings(schema):
        forms.update((text, json.dumps(text)[1:-1], text.partition("#")[2]))
    forms = {form for form in forms if len(form) > 1}
    if not forms:
        return message
    alternatives = [_bounded(form) for form in sorted(forms, key=len, reverse=True)]
    return re.sub("|".join(alternatives), REDACTED, message, flags=re.IGNORECASE)


def _bounded(text: str) -> str:
    """`text` as a pattern that matches a whole word at a word's edge: a property "ab"
    must not blank out part of "unsatisfiable"."""
    pattern = re.escape(text)
    if text[0].isalnum() or text[0] == "_":
        pattern = r"(?<!\w)" + pattern
    if text[-1].isalnum() or text[-1] == "_":
        pattern += r"(?!\w)"
    return pattern


class StructuredOutputError(ValueError):
    """Base class: the request's response format cannot be honoured."""


class ResponseFormatError(StructuredOutputError):
    """The response_format object itself is malformed (unknown type, no schema)."""


class UnsupportedTokenizerError(StructuredOutputError):
    """The model's vocabulary cannot drive the grammar engine (e.g. WordPiece)."""


class SchemaLimitError(StructuredOutputError):
    """The schema exceeds a size, nesting or $ref limit; checked before compiling."""


class SchemaError(StructuredOutputError):
    """The grammar engine rejected the schema; `reason` says why (truncated)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"invalid JSON schema: {reason}")


class GrammarError(StructuredOutputError):
    """A GBNF grammar that is too large, does not parse or does not compile. The message
    starts as llama-server's ("Failed to parse grammar") and adds the reason."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"Failed to parse grammar: {reason}")


class ConflictingConstraintsError(StructuredOutputError):
    """A request names two output constraints (grammar with json_schema or a
    constraining response_format); llama-server refuses the pair too."""

    def __init__(self) -> None:
        super().__init__("Cannot use both json_schema and grammar")


class GrammarTimeoutError(SchemaError):
    """Compiling the schema took longer than allowed."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(f"schema compilation took longer than {timeout_s:g} s")
