"""Anthropic's stream events for one chat turn: content blocks opened, filled and
closed in order as parsed output arrives (thinking, text, tool_use), framed as
`event: NAME` / `data: {...}`."""

from __future__ import annotations

from collections.abc import Iterable

from mlxcel.api.anthropic.translate import stop_reason, thinking_signature, tool_use_id
from mlxcel.api.anthropic.wire import message_body, usage_body
from mlxcel.chat.deltas import ParsedDelta, ToolCallDelta
from mlxcel.http.errors import APIError
from mlxcel.http.sse import sse_event
from mlxcel.turn.chat_turn import ChatOutcome

TEXT, THINKING, TOOL = "text", "thinking", "tool_use"
DELTA_FIELDS = {TEXT: ("text_delta", "text"), THINKING: ("thinking_delta", "thinking")}


def _event(kind: str, **fields) -> str:
    return sse_event(kind, {"type": kind, **fields})


class MessageStream:
    """Text and thinking blocks open at their first non-whitespace character (the
    whitespace before it is held and sent with it), so a stream carries the blocks
    the non-streamed message has."""

    def __init__(self, message_id: str, model: str, input_tokens: int) -> None:
        self.message_id = message_id
        self.model = model
        self.input_tokens = input_tokens
        self._blocks = 0  # blocks opened so far: the next block's index
        self._open: tuple[str, int | None] | None = None  # (kind, tool index)
        self._held = {TEXT: "", THINKING: ""}
        self._thinking = ""  # the open thinking block's text, for its signature
        self._tool_blocks: dict[int, int] = {}  # tool-call index -> block index
        self._tool_held: dict[int, str] = {}  # a call's arguments while they are whitespace only
        self._tool_object: dict[int, bool] = {}  # whether a call's arguments are a JSON object

    def start(self) -> list[str]:
        message = message_body(self.message_id, self.model, [], None, None, usage_body(self.input_tokens, 0))
        return [_event("message_start", message=message), self.ping()]

    @staticmethod
    def ping() -> str:
        return _event("ping")

    def feed(self, delta: ParsedDelta, owed: Iterable[ToolCallDelta] = ()) -> list[str]:
        events = []
        if delta.reasoning:
            events += self._text(THINKING, delta.reasoning)
        if delta.content:
            events += self._text(TEXT, delta.content)
        for call in [*delta.tool_calls, *owed]:
            events += self._tool(call)
        return events

    def finish(self, outcome: ChatOutcome) -> list[str]:
        events = self.feed(outcome.tail, outcome.owed) + self._close()
        reason, sequence = stop_reason(outcome)
        finish = outcome.finish
        events.append(_event("message_delta", delta={"stop_reason": reason, "stop_sequence": sequence},
                             usage=usage_body(finish.prompt_tokens, finish.completion_tokens, finish.cached_tokens)))
        events.append(_event("message_stop"))
        return events

    @staticmethod
    def error(error: APIError) -> str:
        """A failure after the stream began: Anthropic's `error` event ends it."""
        return sse_event("error", error.anthropic_body())

    def _text(self, kind: str, text: str) -> list[str]:
        index = self._blocks - 1
        if self._open == (kind, None):
            return [self._delta(index, kind, text)]
        held = self._held[kind] + text
        if not held.strip():
            self._held[kind] = held
            return []
        self._held[kind] = ""
        events = self._close()
        block = {"type": kind, kind: ""}
        if kind == THINKING:
            block["signature"] = ""
        events += [self._start(block, (kind, None)), self._delta(self._blocks - 1, kind, held)]
        return events

    def _delta(self, index: int, kind: str, text: str) -> str:
        if kind == THINKING:
            self._thinking += text
        delta_type, field = DELTA_FIELDS[kind]
        return _event("content_block_delta", index=index, delta={"type": delta_type, field: text})

    def _tool(self, call: ToolCallDelta) -> list[str]:
        events = []
        if call.name is not None:  # a call's first delta: its own block
            events += self._close()
            block = {"type": TOOL, "id": tool_use_id(call.id or ""), "name": call.name, "input": {}}
            events.append(self._start(block, (TOOL, call.index)))
            self._tool_blocks[call.index] = self._blocks - 1
        index = self._tool_blocks.get(call.index)
        fragment = self._object_text(call.index, call.arguments)
        if fragment and index is not None:
            # arguments owed to an earlier call (a parser that lagged behind) still go
            # to that call's block, so no argument is lost
            events.append(_event("content_block_delta", index=index,
                                 delta={"type": "input_json_delta", "partial_json": fragment}))
        return events

    def _object_text(self, call: int, fragment: str) -> str:
        """What of a call's argument fragment goes out as `partial_json`: an object's
        text as it comes, nothing of arguments that are no object (`"Paris"`). The whole
        message's input is `{}` for those, and a client would fail to parse them."""
        if call not in self._tool_object:
            text = self._tool_held.get(call, "") + fragment
            if not text.strip():
                self._tool_held[call] = text
                return ""
            self._tool_held.pop(call, None)
            self._tool_object[call] = text.lstrip().startswith("{")
            fragment = text
        return fragment if self._tool_object[call] else ""

    def _start(self, block: dict, opened: tuple[str, int | None]) -> str:
        self._open = opened
        self._blocks += 1
        return _event("content_block_start", index=self._blocks - 1, content_block=block)

    def _close(self) -> list[str]:
        if self._open is None:
            return []
        index = self._blocks - 1
        events = []
        if self._open[0] == THINKING:
            events.append(_event("content_block_delta", index=index,
                                 delta={"type": "signature_delta", "signature": thinking_signature(self._thinking)}))
            self._thinking = ""
        events.append(_event("content_block_stop", index=index))
        self._open = None
        return events
