"""Tool-call formats, registered by name. Importing this package registers them all,
in detection order: the most specific template markers first."""

from mlxcel.chat.tool_parsers.base import TOOL_PARSERS, ToolCallParser, detect_parser, register

__all__ = ["TOOL_PARSERS", "ToolCallParser", "detect_parser", "register"]
