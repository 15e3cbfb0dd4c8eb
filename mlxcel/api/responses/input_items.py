"""Responses input items as chat messages.

Input is a string (one user message) or an array of items: messages (an item with a
role and no type is a message; assistant messages take output_text and refusal parts
so a previous `response.output` replays as input), function_call and
function_call_output items, reasoning items (their text goes onto the assistant turn
that follows) and compaction items. A compaction item stands for everything before it
but the system and developer messages: it replays as its summary and the items it
retained. Images and audio in user and system messages become chat media parts
(placed by the chat layer when the model has a projector); file inputs are 400s.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mlxcel.api.responses.capsule import decode_capsule
from mlxcel.chat.errors import ChatInputError
from mlxcel.chat.media_parts import sent_at

SYSTEM_ROLES = ("system", "developer")
MESSAGE_ROLES = ("user", "assistant", *SYSTEM_ROLES)
SUMMARY_HEADING = "Summary of the earlier conversation:\n"
SUMMARY_MARK = "_mlxcel_summary"  # on the system message a replayed compaction item becomes
TEXT_PARTS = ("input_text", "output_text", "text")
MEDIA_PARTS = ("input_image", "image_url", "input_audio", "audio")


def as_items(value: str | list[dict] | None) -> list[dict]:
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return [dict(item) for item in value]


def item_kind(item: dict) -> str:
    """The item's type; a role without a type is a message."""
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return kind or ""


def is_system(item: dict) -> bool:
    return item_kind(item) == "message" and item.get("role") in SYSTEM_ROLES


def is_user(item: dict) -> bool:
    return item_kind(item) == "message" and item.get("role") == "user"


def collapse(items: list[dict]) -> list[dict]:
    """The items from the last compaction item on, after the system and developer
    messages before it: what the compaction item stands for is dropped."""
    last = max((i for i, item in enumerate(items) if item_kind(item) == "compaction"), default=None)
    if last is None:
        return list(items)
    return [item for item in items[:last] if is_system(item)] + items[last:]


def replay(items: list[dict], where: str = "input") -> list[dict]:
    """Compaction items expanded: each stands for everything before it but the
    system and developer messages (an earlier summary included, as its own summary
    covers it), and replays as those messages, a system message with its summary,
    the items it retained, then what follows it. One pass: the system messages
    before the latest compaction item are kept apart from what came after it."""
    kept: list[dict] = []  # system and developer messages before the latest compaction item
    tail: list[dict] = []  # everything since it
    for i, item in enumerate(items):
        if item_kind(item) != "compaction":
            tail.append(item)
            continue
        capsule = decode_capsule(item.get("encrypted_content"), f"{where}[{i}]")
        kept.extend(x for x in tail if is_system(x) and not x.get(SUMMARY_MARK))
        tail = [{"type": "message", "role": "system", "content": SUMMARY_HEADING + capsule.summary,
                 SUMMARY_MARK: True}, *replay(capsule.retained, f"{where}[{i}].retained")]
    return kept + tail


def _part_text(part: Any, role: str, where: str) -> str:
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        raise ChatInputError(f"{where}: a content part must be an object")
    kind = part.get("type")
    if kind in TEXT_PARTS:
        text = part.get("text")
        if not isinstance(text, str):
            raise ChatInputError(f"{where}: {kind} needs a string 'text'")
        return text
    if kind == "refusal" and role == "assistant":
        return str(part.get("refusal") or "")
    if kind in MEDIA_PARTS:
        raise ChatInputError(f"{where}: {kind} input is not supported here (only in user and system messages)",
                             code="unsupported_content_type")
    if kind == "input_file":
        raise ChatInputError(f"{where}: input_file parts are not supported", code="unsupported_content_type")
    raise ChatInputError(f"{where}: unknown content part type {kind!r}")


def content_string(content: Any, role: str, where: str, describe_media: bool = False, field: str = "content") -> str:
    """The content as text; with `describe_media`, a media part is a short placeholder
    ("[image]") instead of an error (a transcript to summarize). `field`: the item's
    key that holds it (a function_call_output's is "output"), for error paths."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ChatInputError(f"{where}.{field} must be a string or an array of content parts")

    def text(part: Any, at: str) -> str:
        if describe_media and isinstance(part, dict) and part.get("type") in MEDIA_PARTS:
            return "[audio]" if "audio" in part["type"] else "[image]"
        return _part_text(part, role, at)

    return "\n".join(text(p, f"{where}.{field}[{n}]") for n, p in enumerate(content))


def _media_part(part: dict, where: str) -> dict:
    """A Responses media part as the chat content part it stands for."""
    kind = part.get("type")
    if kind == "input_image":
        if part.get("image_url") is None and part.get("file_id") is not None:
            raise ChatInputError(f"{where}: input_image by file_id is not supported (send image_url: a URL or a "
                                 "data URI)", code="unsupported_content_type")
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
        if not isinstance(url, str) or not url:
            raise ChatInputError(f"{where}: input_image needs a string 'image_url'")
        return {"type": "image_url", "image_url": {"url": url}}
    if kind == "audio":
        raise ChatInputError(f"{where}: audio parts are not supported (send input_audio)",
                             code="unsupported_content_type")
    return part  # image_url and input_audio have the chat shape already


def message_content(content: Any, role: str, where: str, field: str = "content") -> str | list[dict]:
    """A user, system or tool message's content: a string, or chat content parts when
    it holds images or audio (a function_call_output's `output` may, as a screenshot
    tool's does)."""
    if role == "assistant" or not isinstance(content, list) or not any(
            isinstance(p, dict) and p.get("type") in MEDIA_PARTS for p in content):
        return content_string(content, role, where, field=field)
    parts = []
    for n, part in enumerate(content):
        at = f"{where}.{field}[{n}]"
        if isinstance(part, dict) and part.get("type") in MEDIA_PARTS:
            parts.append(sent_at(_media_part(part, at), at))
        else:
            parts.append({"type": "text", "text": _part_text(part, role, at)})
    return parts


def _reasoning_text(item: dict, where: str) -> str:
    parts = item.get("content")
    if parts is None:
        return ""
    if not isinstance(parts, list):
        raise ChatInputError(f"{where}.content must be an array of reasoning_text parts")
    texts = []
    for n, part in enumerate(parts):
        if not isinstance(part, dict) or part.get("type") != "reasoning_text":
            continue  # summaries and unknown parts carry nothing to render
        text = part.get("text", "")
        if not isinstance(text, str):
            raise ChatInputError(f"{where}.content[{n}]: reasoning_text needs a string 'text'")
        texts.append(text)
    return "\n".join(texts)


def _check_nesting(text: str, where: str) -> None:
    """Templates read arguments as parsed JSON: refuse what the parser cannot nest."""
    try:
        json.loads(text)
    except RecursionError:
        raise ChatInputError(f"{where}: the JSON is nested too deeply") from None
    except ValueError:
        pass  # text that is not JSON is rendered as text


class _MessageBuilder:
    def __init__(self) -> None:
        self.messages: list[dict] = []
        self.call_names: dict[str, str] = {}
        self.pending_reasoning = ""

    def _assistant(self, can_merge: bool) -> dict:
        last = self.messages[-1] if self.messages else None
        if can_merge and last is not None and last["role"] == "assistant" and not last.get("_closed"):
            return last
        message: dict[str, Any] = {"role": "assistant", "content": ""}
        if self.pending_reasoning:
            message["reasoning_content"] = self.pending_reasoning
            self.pending_reasoning = ""
        self.messages.append(message)
        return message

    def message(self, item: dict, where: str) -> None:
        role = item.get("role")
        if role not in MESSAGE_ROLES:
            raise ChatInputError(f"{where}.role must be one of {', '.join(MESSAGE_ROLES)}")
        text = message_content(item.get("content"), role, where)
        if role == "assistant":
            message = self._assistant(can_merge=False)
            message["content"] = text
            return
        self.pending_reasoning = ""  # reasoning belongs to the assistant turn right after it
        self.messages.append({"role": role, "content": text})

    def function_call(self, item: dict, where: str) -> None:
        name, call_id = item.get("name"), item.get("call_id")
        if not isinstance(name, str) or not name or not isinstance(call_id, str) or not call_id:
            raise ChatInputError(f"{where}: a function_call needs 'name' and 'call_id'")
        arguments = item.get("arguments", "")
        if not isinstance(arguments, str):
            raise ChatInputError(f"{where}.arguments must be a string of JSON")
        _check_nesting(arguments, f"{where}.arguments")
        message = self._assistant(can_merge=True)
        message.setdefault("tool_calls", []).append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
        self.call_names[call_id] = name

    def function_call_output(self, item: dict, where: str) -> None:
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise ChatInputError(f"{where}: a function_call_output needs 'call_id'")
        output = item.get("output")
        text = output if isinstance(output, str) else message_content(output, "tool", where, field="output")
        message = {"role": "tool", "tool_call_id": call_id, "content": text}
        if call_id in self.call_names:
            message["name"] = self.call_names[call_id]
        self.messages.append(message)

    def close_turn(self) -> None:
        if self.messages and self.messages[-1]["role"] == "assistant":
            self.messages[-1]["_closed"] = True


def items_to_messages(items: list[dict], where: str = "input", labels: dict[int, str] | None = None) -> list[dict]:
    """Chat messages ({"role", "content", ...}) for replayed items; leading system
    and developer messages are joined into one. `labels`: what errors call an item
    (by its id), where its place in `items` is not where the client sent it."""
    builder = _MessageBuilder()
    for i, item in enumerate(items):
        at = labels.get(id(item)) if labels else None
        at = at or f"{where}[{i}]"
        kind = item_kind(item)
        if kind == "message":
            builder.message(item, at)
            if item.get("role") != "assistant":
                builder.close_turn()
        elif kind == "function_call":
            builder.function_call(item, at)
        elif kind == "function_call_output":
            builder.close_turn()
            builder.function_call_output(item, at)
        elif kind == "reasoning":
            builder.close_turn()
            builder.pending_reasoning = _reasoning_text(item, at)
        elif kind == "compaction":
            raise ChatInputError(f"{at}: compaction items are replayed before translation")  # see replay()
        else:
            raise ChatInputError(f"{at}: input items of type {kind!r} are not supported")
    for message in builder.messages:
        message.pop("_closed", None)
    return join_leading_system(builder.messages)


def join_leading_system(messages: list[dict]) -> list[dict]:
    n = 0
    while n < len(messages) and messages[n]["role"] in SYSTEM_ROLES:
        n += 1
    if n < 2:
        return messages
    contents = [m["content"] for m in messages[:n] if m["content"]]
    if all(isinstance(c, str) for c in contents):
        return [{"role": "system", "content": "\n\n".join(contents)}, *messages[n:]]
    # one of them holds media parts: the parts of all, an empty text part between two messages
    parts: list[dict] = []
    for content in contents:
        if parts:
            parts.append({"type": "text", "text": ""})
        parts.extend([{"type": "text", "text": content}] if isinstance(content, str) else content)
    return [{"role": "system", "content": parts}, *messages[n:]]


def fill_reasoning(messages: list[dict], lookup: Callable[[dict], str | None]) -> list[dict]:
    """Assistant turns replayed without their reasoning get it back from `lookup`."""
    out = []
    for message in messages:
        if message["role"] == "assistant" and not message.get("reasoning_content"):
            reasoning = lookup(message)
            if reasoning:
                message = {**message, "reasoning_content": reasoning}
        out.append(message)
    return out
