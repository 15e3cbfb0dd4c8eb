"""OpenAI's legacy function calling on chat completions, translated at the edge: a
request's `functions` and `function_call` become one-call tools and tool_choice,
history messages' `function_call` and `role: "function"` become tool calls and their
results, and the reply's first call comes back as `message.function_call` (streamed
as `delta.function_call`) with finish_reason "function_call"."""

from __future__ import annotations

from typing import Any

from mlxcel.turn.errors import InvalidRequest

FINISH = "function_call"


def legacy_tools(functions: list[dict] | None, function_call: Any, tools: list | None,
                 tool_choice: Any) -> tuple[list[dict], Any] | None:
    """(tools, tool_choice) for a request that uses `functions`; None when it does not."""
    if functions is None:
        if function_call is not None:
            raise InvalidRequest("'function_call' needs 'functions'")
        return None
    if tools:
        raise InvalidRequest("'functions' and 'tools' cannot be used together: send one of them")
    if tool_choice is not None:
        raise InvalidRequest("'function_call' goes with 'functions', 'tool_choice' with 'tools'")
    choice: Any = None
    if isinstance(function_call, str):
        if function_call not in ("none", "auto"):
            raise InvalidRequest("'function_call' must be 'none', 'auto' or {'name': ...}")
        choice = function_call
    elif isinstance(function_call, dict):
        name = function_call.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest("'function_call' must be 'none', 'auto' or {'name': ...}")
        choice = {"type": "function", "function": {"name": name}}
    elif function_call is not None:
        raise InvalidRequest("'function_call' must be 'none', 'auto' or {'name': ...}")
    return [{"type": "function", "function": f} for f in functions], choice


def legacy_messages(messages: list[dict]) -> list[dict]:
    """An assistant message's `function_call` as its tool call, and a `function`
    message as that call's result (the call it answers: the latest one of its name)."""
    out: list[dict] = []
    calls: dict[str, str] = {}  # a function's name -> the id of its latest call
    for n, message in enumerate(messages):
        call = message.get("function_call")
        if message.get("role") == "assistant" and isinstance(call, dict) and not message.get("tool_calls"):
            name = call.get("name")
            if not isinstance(name, str) or not name:
                raise InvalidRequest(f"messages[{n}].function_call needs a 'name'")
            arguments = call.get("arguments", "")
            if not isinstance(arguments, str):
                raise InvalidRequest(f"messages[{n}].function_call.arguments must be a string")
            calls[name] = f"call_legacy_{n}"
            message = {k: v for k, v in message.items() if k != "function_call"}
            message["tool_calls"] = [{"id": calls[name], "type": "function",
                                      "function": {"name": name, "arguments": arguments}}]
        elif message.get("role") == "function":
            name = message.get("name")
            if not isinstance(name, str) or not name:
                raise InvalidRequest(f"messages[{n}]: a 'function' message needs the 'name' of its function")
            message = {**message, "role": "tool", "tool_call_id": message.get("tool_call_id") or calls.get(name, "")}
        out.append(message)
    return out


def function_call_message(message: dict) -> dict:
    """A whole reply's message: its first tool call as `function_call`."""
    calls = message.pop("tool_calls", None)
    if calls:
        message["function_call"] = dict(calls[0]["function"])
    return message


def function_call_delta(delta: dict) -> dict:
    """A streamed delta: the first call's pieces as `function_call` pieces."""
    first = [call["function"] for call in delta.pop("tool_calls", None) or () if call.get("index", 0) == 0]
    if first:  # a delta may hold the call's start and its first arguments
        piece = {"name": first[0]["name"]} if "name" in first[0] else {}
        piece["arguments"] = "".join(f.get("arguments", "") for f in first)
        delta["function_call"] = piece
    return delta


def finish_reason(reason: str) -> str:
    return FINISH if reason == "tool_calls" else reason
