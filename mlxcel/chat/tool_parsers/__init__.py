"""Tool-call formats, registered by name. Importing this package registers them all;
each declares its own detection priority (see ToolCallParser.detect_priority)."""

from mlxcel.chat.tool_parsers import (  # noqa: F401  (imported to register)
    qwen3_coder,
    glm47,
    longcat,
    minimax_m3,
    minimax_m2,
    kimi_k2,
    harmony,
    granite,
    command_r,
    gemma4,
    function_gemma,
    functionary_v3_2,
    functionary_v3_1,
    mistral,
    mistral_nemo,
    llama3,
    hermes,
    pythonic,
    generic_json,
)
from mlxcel.chat.tool_parsers.base import TOOL_PARSERS, ToolCallParser, detect_parser, register

__all__ = ["TOOL_PARSERS", "ToolCallParser", "detect_parser", "register"]
