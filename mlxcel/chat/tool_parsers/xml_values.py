"""Turning parameter values written as plain text (XML-style call bodies) into
JSON values, guided by the tool's parameter schema.

A parameter typed as string keeps its raw text. Other types are read as JSON,
then as loose literals (Python-style True/None, single-quoted dicts); a value
that fits none of its types stays a string.
"""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any

_INTEGER = re.compile(r"[-+]?\d+")


def schema_types(schema: dict | None) -> set[str]:
    """The JSON types a (sub)schema allows, looking through anyOf/oneOf and enums."""
    if not isinstance(schema, dict):
        return set()
    types: set[str] = set()
    declared = schema.get("type")
    if isinstance(declared, str):
        types.add(declared)
    elif isinstance(declared, list):
        types.update(t for t in declared if isinstance(t, str))
    for key in ("anyOf", "oneOf"):
        for option in schema.get(key) or []:
            types |= schema_types(option)
    if not types and "enum" in schema:
        types.update(_json_type(v) for v in schema["enum"])
    return types


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    return "array" if isinstance(value, list) else "object"


def _loose_literal(text: str) -> Any:
    """JSON first, then a Python literal; raises ValueError when neither."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        # through JSON and back: tuples become lists, sets and NaN are refused
        return json.loads(json.dumps(ast.literal_eval(text), allow_nan=False))
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError) as exc:
        raise ValueError(text) from exc


def _as_type(text: str, kind: str) -> tuple[bool, Any]:
    stripped = text.strip()
    lowered = stripped.lower()
    if kind == "null" and lowered in ("null", "none"):
        return True, None
    if kind == "boolean" and lowered in ("true", "false"):
        return True, lowered == "true"
    if kind == "integer" and _INTEGER.fullmatch(stripped):
        return True, int(stripped)
    if kind == "number":
        if _INTEGER.fullmatch(stripped):
            return True, int(stripped)
        try:
            number = float(stripped)
        except ValueError:
            return False, None
        return math.isfinite(number), number
    if kind in ("object", "array"):
        try:
            value = _loose_literal(stripped)
        except ValueError:
            return False, None
        if isinstance(value, dict if kind == "object" else list):
            return _jsonable(value), value
    return False, None


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
        return True
    except (TypeError, ValueError):
        return False


def coerce_parameter(text: str, schema: dict | None) -> Any:
    """The JSON value of a parameter written as `text`, for a property `schema`
    (None when the parameter is not declared)."""
    types = schema_types(schema)
    if types == {"string"}:
        return text
    for kind in ("null", "boolean", "integer", "number", "object", "array"):
        if kind in types:
            ok, value = _as_type(text, kind)
            if ok:
                return value
    if "string" in types:
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if _jsonable(value) else text


def parameter_schema(tool_parameters: dict | None, key: str) -> dict | None:
    """The schema of property `key` in a tool's parameters schema."""
    if not isinstance(tool_parameters, dict):
        return None
    properties = tool_parameters.get("properties")
    if isinstance(properties, dict) and isinstance(properties.get(key), dict):
        return properties[key]
    return None


def json_member(key: str, value: Any) -> str:
    """`"key": value` as it appears in the arguments JSON we build."""
    return f"{json.dumps(key, ensure_ascii=False)}: {json.dumps(value, ensure_ascii=False)}"
