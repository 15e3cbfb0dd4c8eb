"""Cheap limits applied to a JSON schema before it reaches the grammar compiler.

The walk is iterative and stops at the first limit crossed, so a hostile schema
(very deep, very wide, many references) costs at most a bounded amount of work and
never exhausts the Python stack. Messages name the limit, never the schema.
"""

from __future__ import annotations

import json
import math
from typing import Any

from mlxcel.structured.errors import SchemaLimitError

MAX_SCHEMA_BYTES = 64 * 1024
MAX_DEPTH = 32  # nesting of JSON objects and arrays; the schema itself is level 1
MAX_REFS = 64
# llguidance checks an object's patternProperties pairwise for overlaps, at a cost that
# grows steeply past a hundred (64: ~0.1 s; 200: seconds; 400: minutes, in a compile
# worker nothing can stop, while the constrained requests behind it time out); allOf
# merges objects, so the count is the schema's
MAX_PATTERN_PROPERTIES = 64
# llguidance holds a schema's numbers as doubles and its integers as 64 bits: an integer
# bound or const that rounds to -2^63 or below crashes the process (a segfault), and a
# minimum at 2^63 or above is clamped to 2^63 - 1, which it then emits
INTEGER_LIMIT = 2.0**63
LOWER_BOUNDS = ("minimum", "exclusiveMinimum")


def check_schema(schema: Any) -> None:
    """Raise SchemaLimitError when `schema` (parsed JSON, or its text) is too big,
    too deep, holds too many `$ref`s or patternProperties, or a number beyond 64-bit
    integers."""
    if isinstance(schema, (str, bytes)):
        raw = schema.encode("utf-8") if isinstance(schema, str) else schema
        if len(raw) > MAX_SCHEMA_BYTES:
            raise _too_large()
        try:
            schema = json.loads(raw)
        except RecursionError:
            raise _too_deep() from None
        except ValueError:
            raise SchemaLimitError("schema is not valid JSON") from None
    _walk(schema)
    try:
        size = len(json.dumps(schema, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    except (TypeError, ValueError):
        raise SchemaLimitError("schema is not JSON-serializable") from None
    if size > MAX_SCHEMA_BYTES:
        raise _too_large()


def _walk(schema: Any) -> None:
    """Depth, $ref and patternProperties counts, numbers and a lower bound of the
    serialized size, iteratively."""
    stack: list[tuple[Any, int]] = [(schema, 1)]
    refs = 0
    patterns = 0
    size = 0
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            if depth > MAX_DEPTH:
                raise _too_deep()
            size += 2 + 2 * len(node)
            if size > MAX_SCHEMA_BYTES:
                raise _too_large()
            for key, value in node.items():
                size += len(key) + 2 if isinstance(key, str) else 8
                if key == "$ref":
                    refs += 1
                    if refs > MAX_REFS:
                        raise SchemaLimitError(f"schema has more than {MAX_REFS} $ref entries")
                if key in LOWER_BOUNDS and _is_number(value) and _double(value) >= INTEGER_LIMIT:
                    raise _out_of_range()
                if key == "patternProperties" and isinstance(value, dict):
                    patterns += len(value)
                    if patterns > MAX_PATTERN_PROPERTIES:
                        raise SchemaLimitError(f"schema has more than {MAX_PATTERN_PROPERTIES} patternProperties")
                stack.append((value, depth + 1))
        elif isinstance(node, (list, tuple)):
            if depth > MAX_DEPTH:
                raise _too_deep()
            size += 2 + len(node)
            if size > MAX_SCHEMA_BYTES:
                raise _too_large()
            stack.extend((item, depth + 1) for item in node)
        elif isinstance(node, str):
            size += len(node) + 2
        else:
            if _is_number(node) and _double(node) <= -INTEGER_LIMIT:
                raise _out_of_range()
            size += 1
        if size > MAX_SCHEMA_BYTES:
            raise _too_large()


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _double(value: int | float) -> float:
    """The number as llguidance reads it; an int past the doubles is infinite."""
    try:
        return float(value)
    except OverflowError:
        return math.copysign(math.inf, value)


def _out_of_range() -> SchemaLimitError:
    return SchemaLimitError("schema numbers must be above -2^63, and its minimums below 2^63")


def _too_large() -> SchemaLimitError:
    return SchemaLimitError(f"schema is larger than {MAX_SCHEMA_BYTES // 1024} KiB when serialized")


def _too_deep() -> SchemaLimitError:
    return SchemaLimitError(f"schema nesting is deeper than {MAX_DEPTH} levels")
