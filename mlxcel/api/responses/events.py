"""The output of one response, built item by item from parsed chat deltas, with the
typed SSE events that describe it, each with the next sequence_number.

Reasoning streams in a reasoning item ahead of the message; content in a message
item with one output_text part; each tool call in its own function_call item, its
arguments as response.function_call_arguments.delta as the parser streams them.
Streamed, whole and background responses all run through this builder, so they
produce the same items.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlxcel.api.responses.wire import function_call_item, message_item, new_id, output_text_part, reasoning_item
from mlxcel.chat.deltas import ParsedDelta, ToolCall, ToolCallDelta
from mlxcel.http.sse import compact_json


class EventSequence:
    """Events numbered 0, 1, 2, ... in the order they are made."""

    def __init__(self) -> None:
        self.next = 0

    def __call__(self, type: str, **fields) -> dict:
        event = {"type": type, "sequence_number": self.next, **fields}
        self.next += 1
        return event


def sse_event(event: dict) -> str:
    data = compact_json(event)
    return f"event: {event['type']}\ndata: {data}\n\n"


@dataclass
class _Item:
    kind: str  # reasoning | message | function_call
    index: int
    id: str
    # reasoning or message text; function-call arguments: the deltas, joined when read
    # (a str grown by += is copied whole on every token, quadratic in a long reply)
    parts: list[str] = field(default_factory=list)
    logprobs: list[dict] = field(default_factory=list)
    call_id: str = ""
    name: str = ""
    body: dict | None = None  # the finished item

    @property
    def text(self) -> str:
        if len(self.parts) > 1:
            self.parts = ["".join(self.parts)]
        return self.parts[0] if self.parts else ""

    @text.setter
    def text(self, value: str) -> None:
        self.parts = [value]


class OutputBuilder:
    def __init__(self, event: EventSequence, first_index: int = 0) -> None:
        self.event = event
        self._next_index = first_index
        self._items: list[_Item] = []
        self._current: _Item | None = None  # the open reasoning or message item
        self._calls: dict[int, _Item] = {}  # open function calls by tool-call index
        self._pending_logprobs: list[dict] = []  # tokens whose text is not out yet

    # -- feeding ------------------------------------------------------------------

    def feed(self, delta: ParsedDelta, logprobs: list[dict] | None = None) -> list[dict]:
        """`logprobs`: the entries of the tokens this delta came from; they go with
        the message text (held back until text comes; reasoning tokens have none)."""
        events: list[dict] = []
        self._pending_logprobs.extend(logprobs or [])
        if delta.reasoning:
            self._pending_logprobs.clear()
            item = self._open("reasoning", events)
            item.parts.append(delta.reasoning)
            events.append(self.event("response.reasoning_text.delta", item_id=item.id, output_index=item.index,
                                     content_index=0, delta=delta.reasoning))
        if delta.content:
            item = self._open("message", events)
            item.parts.append(delta.content)
            entries, self._pending_logprobs = self._pending_logprobs, []
            item.logprobs.extend(entries)
            events.append(self.event("response.output_text.delta", item_id=item.id, output_index=item.index,
                                     content_index=0, delta=delta.content, logprobs=entries))
        for call in delta.tool_calls:
            events.extend(self._call_delta(call))
        return events

    def _open(self, kind: str, events: list[dict]) -> _Item:
        if self._current is not None and self._current.kind == kind:
            return self._current
        if self._current is not None:
            events.extend(self._close(self._current, "completed"))
        prefix = "rs" if kind == "reasoning" else "msg"
        item = self._new(kind, new_id(prefix))
        self._current = item
        body = reasoning_item(item.id, "", "in_progress") if kind == "reasoning" else message_item(item.id, "", "in_progress")
        part = {"type": "reasoning_text", "text": ""} if kind == "reasoning" else output_text_part("")
        events.append(self.event("response.output_item.added", output_index=item.index, item=body))
        events.append(self.event("response.content_part.added", item_id=item.id, output_index=item.index,
                                 content_index=0, part=part))
        return item

    def _new(self, kind: str, id: str) -> _Item:
        item = _Item(kind, self._next_index, id)
        self._next_index += 1
        self._items.append(item)
        return item

    def _call_delta(self, call: ToolCallDelta) -> list[dict]:
        events: list[dict] = []
        item = self._calls.get(call.index)
        if item is None:
            if self._current is not None:
                events.extend(self._close(self._current, "completed"))
            item = self._new("function_call", new_id("fc"))
            item.call_id, item.name = call.id or new_id("call"), call.name or ""
            self._calls[call.index] = item
            events.append(self.event("response.output_item.added", output_index=item.index,
                                     item=function_call_item(item.id, item.call_id, item.name, "", "in_progress")))
        if call.arguments:
            item.parts.append(call.arguments)
            events.append(self.event("response.function_call_arguments.delta", item_id=item.id,
                                     output_index=item.index, delta=call.arguments))
        return events

    # -- finishing ----------------------------------------------------------------

    def finish(self, calls: list[ToolCall], status: str) -> list[dict]:
        """Close every open item. `calls` is the final parse (authoritative for
        names and arguments); `status` the response's (an open message or reasoning
        item of an incomplete response is incomplete)."""
        events: list[dict] = []
        if not self._items and status in ("completed", "incomplete"):
            self._open("message", events)
        item_status = "completed" if status == "completed" else "incomplete"
        for index, item in sorted(self._calls.items()):
            if index < len(calls):
                item.name, item.text = calls[index].name, calls[index].arguments
        messages = [i for i in self._items if i.kind == "message"]
        if messages and messages[-1].body is None:  # tokens with no text of their own (an end token)
            messages[-1].logprobs.extend(self._pending_logprobs)
        self._pending_logprobs = []
        open_items = [i for i in self._items if i.body is None]
        for item in open_items:
            events.extend(self._close(item, "completed" if item.kind == "function_call" else item_status))
        self._current = None
        return events

    def _close(self, item: _Item, status: str) -> list[dict]:
        if item is self._current:
            self._current = None
        if item.kind == "function_call":
            item.body = function_call_item(item.id, item.call_id, item.name, item.text, status)
            return [
                self.event("response.function_call_arguments.done", item_id=item.id, output_index=item.index,
                           name=item.name, arguments=item.text),
                self.event("response.output_item.done", output_index=item.index, item=item.body),
            ]
        if item.kind == "reasoning":
            item.body = reasoning_item(item.id, item.text, status)
            part = item.body["content"][0]
            done = self.event("response.reasoning_text.done", item_id=item.id, output_index=item.index,
                              content_index=0, text=item.text)
        else:
            item.body = message_item(item.id, item.text, status, item.logprobs)
            part = item.body["content"][0]
            done = self.event("response.output_text.done", item_id=item.id, output_index=item.index,
                              content_index=0, text=item.text, logprobs=item.logprobs)
        return [
            done,
            self.event("response.content_part.done", item_id=item.id, output_index=item.index, content_index=0,
                       part=part),
            self.event("response.output_item.done", output_index=item.index, item=item.body),
        ]

    @property
    def output(self) -> list[dict]:
        """The finished items, in output order."""
        return [item.body for item in self._items if item.body is not None]

