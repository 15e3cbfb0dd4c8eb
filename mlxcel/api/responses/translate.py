"""A Responses request as a chat turn: function tools and tool_choice in the chat
shape, text.format as a response_format, instructions and history as messages."""

from __future__ import annotations

from typing import Any

from mlxcel.api.responses.input_items import as_items, fill_reasoning, items_to_messages, replay
from mlxcel.api.responses.wire import ResponsesInput, ResponsesRequest
from mlxcel.chat.errors import ChatInputError
from mlxcel.chat.template_kwargs import resolve_template_kwargs
from mlxcel.turn.chat_turn import ChatTurnSpec

TOOL_CHOICE_MODES = ("none", "auto", "required")


def check_request(body: ResponsesInput) -> None:
    """The 400s every route of the family shares."""
    if body.truncation not in (None, "disabled"):
        raise ChatInputError(f"truncation {body.truncation!r} is not supported: only 'disabled' is")
    if body.previous_response_id and body.conversation:
        raise ChatInputError("previous_response_id and conversation cannot be used together")


# a conversation is created by naming it; its id is kept with every turn, so it is bounded
# (OpenAI's conv_ ids are ~50 characters)
MAX_CONVERSATION_ID = 512


def conversation_id(body: ResponsesInput) -> str | None:
    value = body.conversation
    if value is None:
        return None
    if isinstance(value, dict):
        value = value.get("id")
    if not isinstance(value, str) or not value:
        raise ChatInputError("conversation must be a conversation id or {'id': ...}")
    if len(value) > MAX_CONVERSATION_ID:
        raise ChatInputError(f"conversation: an id is at most {MAX_CONVERSATION_ID} characters, not {len(value)}")
    return value


def _optional(function: dict, key: str, kind: type, where: str) -> None:
    value = function.get(key)
    if value is not None and not isinstance(value, kind):
        raise ChatInputError(f"{where}.{key} must be {'an object' if kind is dict else f'a {kind.__name__}'}")


def chat_tools(tools: list[dict] | None) -> list[dict]:
    out = []
    for i, tool in enumerate(tools or []):
        kind = tool.get("type")
        if kind != "function":
            raise ChatInputError(f"tools[{i}]: tool type {kind!r} is not supported: only function tools are "
                                 "(mlxcel runs no hosted tools)", code="unsupported_tool_type")
        function = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        name = function.get("name")
        if not isinstance(name, str) or not 1 <= len(name) <= 256:
            raise ChatInputError(f"tools[{i}].name must be a string of 1 to 256 characters")
        for key, key_kind in (("description", str), ("parameters", dict), ("strict", bool)):
            _optional(function, key, key_kind, f"tools[{i}]")
        definition = {"name": name}
        for key in ("description", "parameters", "strict"):
            if function.get(key) is not None:
                definition[key] = function[key]
        out.append({"type": "function", "function": definition})
    return out


def _choice_name(choice: dict, where: str) -> str:
    """A function's name in the Responses shape ({"name"}) or the chat one ({"function": {"name"}})."""
    function = choice.get("function")
    name = choice.get("name")
    if name is None and isinstance(function, dict):
        name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ChatInputError(f"{where} needs a function 'name' string")
    return name


def chat_tool_choice(tool_choice: Any, tools: list[dict]) -> tuple[Any, list[dict]]:
    """(the chat tool_choice, the tools it leaves rendered)."""
    if tool_choice is None:
        return None, tools
    if isinstance(tool_choice, str):
        if tool_choice not in TOOL_CHOICE_MODES:
            raise ChatInputError("tool_choice must be 'none', 'auto', 'required' or an object")
        return tool_choice, tools
    if not isinstance(tool_choice, dict):
        raise ChatInputError("tool_choice must be 'none', 'auto', 'required' or an object")
    kind = tool_choice.get("type")
    if kind == "function":
        return {"type": "function", "function": {"name": _choice_name(tool_choice, "tool_choice")}}, tools
    if kind == "allowed_tools":
        listed = tool_choice.get("tools")
        if not isinstance(listed, list) or not all(isinstance(t, dict) for t in listed):
            raise ChatInputError("tool_choice.tools must be an array of tool objects")
        allowed = {_choice_name(t, f"tool_choice.tools[{n}]") for n, t in enumerate(listed)}
        mode = tool_choice.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise ChatInputError("tool_choice.mode must be 'auto' or 'required'")
        return mode, [t for t in tools if t["function"]["name"] in allowed]
    if not isinstance(kind, str):
        raise ChatInputError("tool_choice.type must be a string")
    raise ChatInputError(f"tool_choice type {kind!r} is not supported: only function tools are",
                         code="unsupported_tool_type")


def response_format(text: dict | None, chat_format: Any = None) -> dict | None:
    """text.format as chat's response_format; without one, a `response_format` sent in
    chat's shape (the multi-model spec honours it here too), checked as chat checks it."""
    fmt = (text or {}).get("format")
    if fmt is None:
        if chat_format is None:
            return None
        if not isinstance(chat_format, dict):
            raise ChatInputError("response_format must be an object")
        return chat_format
    if not isinstance(fmt, dict):
        raise ChatInputError("text.format must be an object")
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_schema":
        _check_format_fields(fmt)
        wrapper = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": wrapper}
    if kind == "json_object":
        return {"type": "json_object"}
    raise ChatInputError("text.format.type must be 'text', 'json_schema' or 'json_object'")


FORMAT_FIELD_TYPES = {"schema": (dict, "an object"), "name": (str, "a string"), "strict": (bool, "a boolean")}


def _check_format_fields(fmt: dict) -> None:
    """The json_schema format's fields, named as the client sent them (chat's checks name
    response_format.json_schema's)."""
    for field, (kind, noun) in FORMAT_FIELD_TYPES.items():
        if fmt.get(field) is not None and not isinstance(fmt[field], kind):
            raise ChatInputError(f"text.format.{field} must be {noun}", code="invalid_response_format")


def template_kwargs(data: dict, server_defaults: dict) -> dict:
    """chat_template_kwargs only: reasoning.effort is not mapped here, unlike chat."""
    try:
        return resolve_template_kwargs(data, server_defaults)
    except ValueError as exc:
        raise ChatInputError(str(exc)) from None


def chat_messages(instructions: str | None, history: list[dict], reasoning_lookup=None,
                  n_input: int | None = None) -> list[dict]:
    """`n_input`: how many of the history's last items the request itself sent; errors
    name those as `input[k]` (as the client numbers them) and the earlier ones, of the
    stored conversation, as `history[k]`."""
    first = len(history) - n_input if n_input is not None else 0
    labels = {id(item): f"input[{i - first}]" if i >= first else f"history[{i}]" for i, item in enumerate(history)}
    items = replay(history)
    if instructions:
        items = [{"type": "message", "role": "system", "content": instructions}, *items]
        labels[id(items[0])] = "instructions"
    messages = items_to_messages(items, labels=labels)
    if reasoning_lookup is not None:
        messages = fill_reasoning(messages, reasoning_lookup)
    if not messages:
        raise ChatInputError("input is empty: send a message or a previous_response_id with history")
    return messages


def turn_spec(data: dict, body: ResponsesInput, history: list[dict], server_template_kwargs: dict,
              reasoning_lookup=None) -> ChatTurnSpec:
    tools = chat_tools(body.tools)
    tool_choice, tools = chat_tool_choice(body.tool_choice, tools)
    request = body if isinstance(body, ResponsesRequest) else None
    return ChatTurnSpec(
        messages=chat_messages(body.instructions, history, reasoning_lookup, n_input=len(as_items(body.input))),
        sampling=body,
        tools=tools,
        tool_choice=tool_choice,
        response_format=response_format(body.text, data.get("response_format")),
        template_kwargs=template_kwargs(data, server_template_kwargs),
        max_tokens=request.max_output_tokens if request else None,
        logprobs=request.top_logprobs if request else None,
        thinking_budget=next((v for v in (request.thinking_budget, request.thinking_budget_tokens) if v is not None),
                             None) if request else None,
        report_progress=bool(request and request.stream and (request.timings_per_token or request.return_progress)),
        max_tool_calls=1 if request is not None and request.parallel_tool_calls is False else None,
    )
