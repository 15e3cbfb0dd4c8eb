"""Pythonic calls: `[get_weather(city="Paris", days=2), other(x=1)]`.

Either the whole reply (names must be declared tools), or inside
`<|tool_call_start|>` / `<|tool_call_end|>` after prose (LFM2 and some Nemotron
templates). The list is read with `ast`, accepting literals only: nothing is
evaluated. Calls are sent whole at the end of generation.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from mlxcel.chat.deltas import ParsedOutput, ToolCall, new_call_id
from mlxcel.chat.tool_parsers.base import register
from mlxcel.chat.tool_parsers.buffered_parser import BufferedToolParser

START, END = "<|tool_call_start|>", "<|tool_call_end|>"
_BARE_WORDS = {"true": True, "false": False, "null": None, "none": None}


class NotLiteral(ValueError):
    pass


def literal_value(node: ast.AST) -> Any:
    """The JSON-able value of a literal expression node; raises NotLiteral."""
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (str, int, float, bool))):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [literal_value(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):
            raise NotLiteral("dict unpacking")
        keys = [literal_value(key) for key in node.keys]  # type: ignore[arg-type]
        if not all(isinstance(key, (str, int, float, bool)) or key is None for key in keys):
            raise NotLiteral("dict key")
        return {k if isinstance(k, str) else json.dumps(k): literal_value(v) for k, v in zip(keys, node.values)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = literal_value(node.operand)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Name) and node.id.lower() in _BARE_WORDS:
        return _BARE_WORDS[node.id.lower()]
    raise NotLiteral(ast.dump(node))


def _dotted_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted_name(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def python_calls(text: str) -> list[tuple[str, str]] | None:
    """[(name, arguments JSON)] from `[f(a=1), g()]` or a single `f(a=1)`, or None
    when `text` is anything else (positional arguments included)."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    nodes = tree.elts if isinstance(tree, (ast.List, ast.Tuple)) else [tree]
    calls = []
    for node in nodes:
        if not isinstance(node, ast.Call) or node.args:
            return None
        name = _dotted_name(node.func)
        if name is None or any(kw.arg is None for kw in node.keywords):
            return None
        try:
            arguments = {kw.arg: literal_value(kw.value) for kw in node.keywords}
            calls.append((name, json.dumps(arguments, ensure_ascii=False, allow_nan=False)))
        except (NotLiteral, ValueError):
            return None
    return calls or None


@register
class PythonicParser(BufferedToolParser):
    name = "pythonic"
    detect_priority = 180
    start_markers = (START,)
    reply_openers = "["

    @classmethod
    def matches_template(cls, template: str) -> bool:
        return START in template or "[func_name1(" in template

    def parse(self, text: str) -> ParsedOutput:
        stripped = text.strip()
        if START not in text:
            calls = python_calls(stripped) if stripped.startswith("[") else None
            if calls and all(self.is_declared(name) for name, _ in calls):
                return _output("", calls)
            return ParsedOutput(content=text)
        content, found, at = "", [], 0
        while (start := text.find(START, at)) >= 0:
            content += text[at:start]
            end = text.find(END, start)
            body_end = len(text) if end < 0 else end
            calls = python_calls(text[start + len(START) : body_end])
            after = len(text) if end < 0 else end + len(END)
            if calls is None:
                content += text[start:after]
            else:
                found += calls
            at = after
        tail = text[at:]
        content += tail.lstrip() if found else tail
        return _output(content, found)


def _output(content: str, calls: list[tuple[str, str]]) -> ParsedOutput:
    return ParsedOutput(content, [ToolCall(name, arguments, new_call_id()) for name, arguments in calls])
