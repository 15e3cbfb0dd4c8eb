"""The errors of the structured-output layer. All of them are the caller's fault (an
HTTP 400), and none of their messages repeat the schema."""

from __future__ import annotations

MAX_REASON_CHARS = 200


def one_line_reason(message: str) -> str:
    """llguidance's message as one line, without its debug marker, short enough not to
    carry the schema."""
    text = " ".join(message.replace("<non-verbose/>", " ").split())
    if len(text) > MAX_REASON_CHARS:
        text = text[: MAX_REASON_CHARS - 3] + "..."
    return text or "rejected by the grammar compiler"


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
