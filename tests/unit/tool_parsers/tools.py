"""Tools (OpenAI request shape) and helpers shared by the tool-call parser tests."""

from __future__ import annotations

import json

from mlxcel.chat.deltas import ParsedDelta
from mlxcel.chat.tool_parsers.base import ToolCallParser


def tool(name: str, properties: dict, required: list[str] | None = None) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} tool",
            "parameters": {"type": "object", "properties": properties, "required": required or []},
        },
    }


WEATHER = tool("get_weather", {"city": {"type": "string"}, "days": {"type": "integer"}}, ["city"])
SEARCH = tool("search_web", {"query": {"type": "string"}, "limit": {"type": "integer"}}, ["query"])
TOOLS = [WEATHER, SEARCH]

# get_weather with parameters of every JSON type, for formats whose values are coerced
TYPED_WEATHER = tool(
    "get_weather",
    {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "units": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "detailed": {"type": "boolean"},
        "threshold": {"type": "number"},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "filters": {"type": "object", "properties": {"min_temp": {"type": "integer"}, "label": {"type": "string"}}},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    ["city"],
)
TYPED_TOOLS = [TYPED_WEATHER, SEARCH]


def feed_pieces(parser_cls: type[ToolCallParser], pieces: list[str], tools=TOOLS) -> list[ParsedDelta]:
    """The delta returned for each piece, then the one from finish()."""
    parser = parser_cls(tools)
    return [parser.feed(piece) for piece in pieces] + [parser.finish()]


def args(call) -> dict:
    """A finished call's arguments, decoded."""
    return json.loads(call.arguments)
