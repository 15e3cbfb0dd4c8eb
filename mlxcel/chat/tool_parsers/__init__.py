"""Tool-call formats, registered by name. Importing this package registers them all;
each declares its own detection priority (see ToolCallParser.detect_priority)."""

from mlxcel.chat.tool_parsers import (  # noqa: F401  (imported to register)
    command_r,
    function_gemma,
    functionary_v3_1,
    functionary_v3_2,
    gemma4,
    generic_json,
    glm47,
    granite,
    harmony,
    hermes,
    kimi_k2,
    llama3,
    longcat,
    minimax_m2,
    minimax_m3,
    mistral,
    mistral_nemo,
    pythonic,
    qwen3_coder,
)
from mlxcel.chat.tool_parsers.base import TOOL_PARSERS, ToolCallParser, detect_parser, register

__all__ = ["TOOL_PARSERS", "ToolCallParser", "detect_parser", "register"]
