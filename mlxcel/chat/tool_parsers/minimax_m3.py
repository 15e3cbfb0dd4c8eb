"""MiniMax M3: namespaced XML, every tag prefixed with the token `]<]minimax[>[`.

    ]<]minimax[>[<tool_call>
    ]<]minimax[>[<invoke name="create_order">]<]minimax[>[<user_id>42]<]minimax[>[</user_id>
    ]<]minimax[>[<shipping>]<]minimax[>[<city>Paris]<]minimax[>[</city>]<]minimax[>[</shipping>
    ]<]minimax[>[<tags>]<]minimax[>[<item>a]<]minimax[>[</item>]<]minimax[>[</tags>
    ]<]minimax[>[</invoke>
    ]<]minimax[>[</tool_call>

A parameter is named by its tag. A tag holding tags is an object, or an array when
its children are `<item>`s (or the schema says array); a leaf's text is coerced
against the schema of where it sits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from mlxcel.chat.tool_parsers.base import register
from mlxcel.chat.tool_parsers.block_stream import Block, BlockStreamParser, Kind
from mlxcel.chat.tool_parsers.coercion import arguments_json, coerce_value, items_schema, property_schema, schema_types

NS = "]<]minimax[>["
_INVOKE = re.compile(re.escape(NS) + r"<invoke\s+name=([\"'])(.*?)\1\s*>(.*?)" + re.escape(NS) + "</invoke>", re.DOTALL)
# `<key>`, `</key>`, or the attribute form `<parameter name="key">` some outputs use
_TAG = re.compile(r"<(/?)([^<>/\s]+)(?:\s+name=([\"'])(.*?)\3)?\s*>")


@dataclass
class _Node:
    tag: str  # the key this node gives its value under
    element: str = ""  # the tag name its closing tag carries
    text: list[str] = field(default_factory=list)
    children: list[tuple[str, _Node]] = field(default_factory=list)


def _tree(body: str) -> _Node:
    """The tag tree of an invoke body: each tag begins a namespace-token chunk."""
    root = _Node("")
    stack = [root]
    for chunk in body.split(NS):
        match = _TAG.match(chunk)
        rest = chunk[match.end() :] if match else chunk
        if match and match.group(1):  # a closing tag: close up to its opening
            elements = [node.element for node in stack]
            if match.group(2) in elements[1:]:
                while stack[-1].element != match.group(2):
                    stack.pop()
                stack.pop()
        elif match:
            node = _Node(match.group(4) or match.group(2), match.group(2))
            stack[-1].children.append((node.tag, node))
            stack.append(node)
        if rest:
            closing = f"</{stack[-1].element}>"
            if len(stack) > 1 and not stack[-1].children and rest.endswith(closing):
                stack[-1].text.append(rest[: -len(closing)])  # closing tag written without the token
                stack.pop()
            else:
                stack[-1].text.append(rest)
    return root


def _value(node: _Node, schema: dict | None) -> Any:
    if not node.children:
        return coerce_value("".join(node.text), schema)
    if "array" in schema_types(schema) or all(tag == "item" for tag, _ in node.children):
        return [_value(child, items_schema(schema)) for _, child in node.children]
    return _mapping(node, schema)


def _mapping(node: _Node, schema: dict | None) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for tag, child in node.children:
        value = _value(child, property_schema(schema, tag))
        if tag in values:  # a repeated tag collects into a list
            previous = values[tag]
            values[tag] = previous + [value] if isinstance(previous, list) else [previous, value]
        else:
            values[tag] = value
    return values


@register
class MiniMaxM3Parser(BlockStreamParser):
    name = "minimax_m3"
    detect_priority = 40
    OPENINGS: ClassVar[dict[str, Kind]] = {NS + "<tool_call>": "call", NS + "<invoke name=": "call"}
    CLOSINGS: ClassVar[dict[str, str]] = {
        NS + "<tool_call>": NS + "</tool_call>",
        NS + "<invoke name=": NS + "</invoke>",
    }

    @classmethod
    def matches_template(cls, template: str) -> bool:
        return NS in template

    def calls_from_block(self, block: Block) -> list[tuple[str, str]]:
        body = block.body
        if block.opening.marker == NS + "<invoke name=":
            if not block.complete:
                return []
            body = f"{NS}<invoke name={body}{NS}</invoke>"
        calls = []
        for invoke in _INVOKE.finditer(body):
            name = invoke.group(2).strip()
            if not name:
                continue
            values = _mapping(_tree(invoke.group(3)), self.tool_schema(name))
            calls.append((name, arguments_json(values)))
        return calls
