"""Tool declarations shared by the tool-parser tests, OpenAI request shape."""

from __future__ import annotations

import json

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "units": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "detailed": {"type": "boolean"},
                "threshold": {"type": "number"},
                "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "filters": {
                    "type": "object",
                    "properties": {"min_temp": {"type": "integer"}, "label": {"type": "string"}},
                },
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["city"],
        },
    },
}

SEARCH = {
    "type": "function",
    "function": {
        "name": "search_web",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        },
    },
}

TOOLS = [WEATHER, SEARCH]


def args(call) -> dict:
    """A finished call's arguments, decoded."""
    return json.loads(call.arguments)
