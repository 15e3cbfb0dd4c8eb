"""Turning argument values written as text into JSON values, guided by a tool schema.

Formats whose call bodies are not JSON (XML-like tags, Gemma's loose objects) give
each argument as a piece of text. A parameter the schema types as a string keeps
that text exactly; other types are read as JSON, then as loose literals (Python's
`True`/`None`, single-quoted dicts, and `TRUE`/`NONE` in any case where the schema
admits a boolean or null), and fall back to the text itself.
"""

from __future__ import annotations

import ast
import json
from typing import Any

_LOOSE_LITERALS: dict[str, Any] = {
    "True": True,
    "False": False,
    "None": None,
    "true": True,
    "false": False,
    "null": None,
}
# words read in any case, when the schema admits their type
_TYPED_WORDS: dict[str, dict[str, Any]] = {
    "boolean": {"true": True, "false": False},
    "null": {"null": None, "none": None},
}


def schema_types(schema: dict | None) -> set[str]:
    """The JSON types a schema admits: its `type` (a name or a list), the types of its
    `anyOf`/`oneOf` branches, or those implied by `enum`/`const`. Empty when unknown."""
    if not isinstance(schema, dict):
        return set()
    declared = schema.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return {t for t in declared if isinstance(t, str)}
    types: set[str] = set()
    for key in ("anyOf", "oneOf"):
        for branch in schema.get(key) or []:
            types |= schema_types(branch)
    if not types:
        values = schema.get("enum") or ([schema["const"]] if "const" in schema else [])
        types = {_json_type(v) for v in values}
    if not types and isinstance(schema.get("properties"), dict):
        types = {"object"}
    return types


def property_schema(schema: dict | None, key: str) -> dict | None:
    """The schema of property `key` of an object schema, if declared."""
    if not isinstance(schema, dict):
        return None
    properties = schema.get("properties")
    if isinstance(properties, dict) and isinstance(properties.get(key), dict):
        return properties[key]
    for branch_key in ("anyOf", "oneOf"):
        for branch in schema.get(branch_key) or []:
            found = property_schema(branch, key)
            if found is not None:
                return found
    return None


def items_schema(schema: dict | None) -> dict | None:
    """The schema of an array schema's items, if declared."""
    if isinstance(schema, dict) and isinstance(schema.get("items"), dict):
        return schema["items"]
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _fits(value: Any, types: set[str]) -> bool:
    kind = _json_type(value)
    return kind in types or (kind == "integer" and "number" in types)


def _read_literal(text: str, types: set[str]) -> tuple[bool, Any]:
    """(True, value) when `text` reads as JSON or as a loose literal."""
    stripped = text.strip()
    if not stripped:
        return False, None
    for kind, words in _TYPED_WORDS.items():
        if kind in types and stripped.lower() in words:
            return True, words[stripped.lower()]
    try:
        value = json.loads(stripped)
    except ValueError:
        if stripped in _LOOSE_LITERALS:
            return True, _LOOSE_LITERALS[stripped]
        if not (stripped[0] in "[{('\"+-." or stripped[0].isdigit()):
            return False, None
        try:
            value = ast.literal_eval(stripped)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return False, None
    try:
        # through JSON and back: tuples become lists; sets, NaN and infinities are refused
        return True, json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        return False, None


def coerce_value(raw: str, schema: dict | None) -> Any:
    """The JSON value an argument written as `raw` stands for, under `schema`."""
    types = schema_types(schema)
    if types == {"string"}:
        return raw
    ok, value = _read_literal(raw, types)
    if not ok:
        return raw
    if not types:
        return value
    if isinstance(value, float) and value.is_integer() and "integer" in types and "number" not in types:
        return int(value)
    if _fits(value, types):
        return value
    if "string" in types:
        return raw
    return value


def arguments_json(values: dict) -> str:
    """Compact JSON text of a call's arguments, non-ASCII kept as is."""
    return json.dumps(values, ensure_ascii=False, separators=(",", ":"))


def json_member(key: str, value: Any) -> str:
    """`"key": value`, spaced, as arguments JSON built member by member writes it."""
    return f"{json.dumps(key, ensure_ascii=False)}: {json.dumps(value, ensure_ascii=False)}"
