"""Splitting model output into reasoning (`<think>` blocks) and content.

The rules follow llama.cpp's reasoning extraction:

* Reasoning is one leading block. It opens either in the prompt (templates whose
  generation prompt already ends in `<think>`: `start_in_reasoning=True`) or with a
  `<think>` the model emits itself before any content (leading whitespace allowed).
  A `<think>` that appears after content has started is ordinary content, and so is
  a `</think>` outside the block.
* Reasoning is reported without its surrounding whitespace (the newlines after
  `<think>` and before `</think>`); content after `</think>` starts at its first
  non-whitespace character. Whitespace-only reasoning is no reasoning at all.
* A `<think>` at the very start of a block that is already open (a model that
  repeats the marker its prompt opened) is swallowed, so markers never leak.

Streaming and final parses agree for every way of cutting the text into pieces:
`split_reasoning` is the streaming splitter fed the whole text at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from mlxcel.chat.deltas import ParsedDelta
from mlxcel.chat.markers import partial_marker_length

# std::isspace's set, which llama.cpp strips with.
_WS = " \t\n\r\v\f"


@dataclass(frozen=True)
class ReasoningMarkers:
    """The text that opens and closes a model's reasoning block."""

    open: str = "<think>"
    close: str = "</think>"


THINK = ReasoningMarkers()

# llama-server's --reasoning-format values: `none` leaves thoughts in the content;
# the others take them out of it (deepseek-legacy as deepseek: llama.cpp's own parser
# no longer keeps them inline when streaming)
REASONING_FORMATS = ("none", "auto", "deepseek", "deepseek-legacy")


def extracts_reasoning(reasoning_format: str) -> bool:
    return reasoning_format != "none"

_SEEK = "seek"  # output start: whitespace, then maybe an opening marker
_REASONING = "reasoning"
_AFTER = "after"  # just past the closing marker: dropping whitespace
_CONTENT = "content"


class ReasoningSplitter:
    """Streaming reasoning/content split: `feed` each decoded piece, then `finish`.

    A possible marker cut across pieces, whitespace that may turn out to be
    trailing reasoning, and whitespace before a possible leading `<think>` are held
    back until the following text decides them; `finish` releases or drops them.
    """

    def __init__(
        self,
        start_in_reasoning: bool,
        open_marker: str = THINK.open,
        close_marker: str = THINK.close,
    ) -> None:
        self._open = open_marker
        self._close = close_marker
        self._state = _REASONING if start_in_reasoning else _SEEK
        self._buf = ""  # undecided text
        self._block_started = False  # non-whitespace reasoning seen
        self._pending_ws = ""  # reasoning whitespace that may be trailing
        self._fed = 0  # characters fed so far
        self._block_end: int | None = None  # where the closing marker ended, in the text fed

    @property
    def in_reasoning(self) -> bool:
        """Whether text fed now would count as reasoning."""
        return self._state == _REASONING

    def reasoning_extent(self) -> int:
        """How many leading characters of the text fed so far belong to the reasoning
        block, markers included: 0 without one (or with only whitespace in it), all of
        them while it is still open."""
        if not self._block_started:
            return 0
        return self._fed if self._block_end is None else self._block_end

    def feed(self, text: str) -> ParsedDelta:
        self._buf += text
        self._fed += len(text)
        out = ParsedDelta()
        self._run(out, final=False)
        return out

    def finish(self) -> ParsedDelta:
        out = ParsedDelta()
        self._run(out, final=True)
        self._pending_ws = ""  # trailing reasoning whitespace is dropped
        return out

    def _run(self, out: ParsedDelta, final: bool) -> None:
        while True:
            if self._state == _SEEK:
                body = self._buf.lstrip(_WS)
                if body.startswith(self._open):
                    self._buf = body[len(self._open) :]
                    self._state = _REASONING
                    continue
                if not final and (not body or self._open.startswith(body)):
                    return  # only whitespace, or a partial opening marker, so far
                self._state = _CONTENT  # no leading block: the text is content as is
                continue
            if self._state == _REASONING:
                if self._reasoning_step(out, final):
                    continue
                return
            if self._state == _AFTER:
                self._buf = self._buf.lstrip(_WS)
                if not self._buf:
                    return
                self._state = _CONTENT
                continue
            self._emit_content(out, self._buf)
            self._buf = ""
            return

    def _reasoning_step(self, out: ParsedDelta, final: bool) -> bool:
        """Consume reasoning text; True when the block closed and parsing goes on."""
        if not self._block_started:
            self._buf = self._buf.lstrip(_WS)
            if self._buf.startswith(self._open):  # a repeated opening marker
                self._buf = self._buf[len(self._open) :]
                return True
            if not final and self._buf and self._open.startswith(self._buf):
                return False
        end = self._buf.find(self._close)
        if end >= 0:
            self._emit_reasoning(out, self._buf[:end])
            self._pending_ws = ""
            self._buf = self._buf[end + len(self._close) :]
            self._block_end = self._fed - len(self._buf)
            self._state = _AFTER
            return True
        hold = 0 if final else partial_marker_length(self._buf, (self._close,))
        cut = len(self._buf) - hold
        self._emit_reasoning(out, self._buf[:cut])
        self._buf = self._buf[cut:]
        return False

    def _emit_reasoning(self, out: ParsedDelta, text: str) -> None:
        if not self._block_started:
            text = text.lstrip(_WS)
        text = self._pending_ws + text
        body = text.rstrip(_WS)
        self._pending_ws = text[len(body) :]
        if body:
            self._block_started = True
            out.reasoning += body

    def _emit_content(self, out: ParsedDelta, text: str) -> None:
        out.content += text


def split_reasoning(
    text: str,
    start_in_reasoning: bool,
    open_marker: str = THINK.open,
    close_marker: str = THINK.close,
) -> tuple[str, str]:
    """The final (reasoning, content) of a whole generation."""
    reasoning, content, _ = split_reasoning_extent(text, start_in_reasoning, open_marker, close_marker)
    return reasoning, content


def split_reasoning_extent(
    text: str,
    start_in_reasoning: bool,
    open_marker: str = THINK.open,
    close_marker: str = THINK.close,
) -> tuple[str, str, int]:
    """`split_reasoning`, and how many leading characters of `text` the reasoning block
    spans (see `ReasoningSplitter.reasoning_extent`)."""
    splitter = ReasoningSplitter(start_in_reasoning, open_marker, close_marker)
    out = splitter.feed(text)
    out.extend(splitter.finish())
    return out.reasoning, out.content, splitter.reasoning_extent()


# --- prior turns -------------------------------------------------------------

_REASONING_FIELDS = ("reasoning_content", "reasoning")


def strip_prior_reasoning(
    messages: list[dict[str, Any]],
    preserve: bool,
    open_marker: str = THINK.open,
    close_marker: str = THINK.close,
) -> list[dict[str, Any]]:
    """Qwen3's rolling-checkpoint rule for multi-turn reasoning.

    Walking back from the end, the latest user turn that is not a tool result
    (`<tool_response>...</tool_response>`) is the current query. Every assistant
    message before it loses its think blocks and its `reasoning_content` (and
    vLLM's `reasoning`) field; messages after it keep theirs. With no such user
    turn nothing is stripped. `preserve=True` (preserve_thinking) keeps all.
    Returns a new list of new dicts; the input is never modified.
    """
    copied = [dict(m) for m in messages]
    if preserve:
        return copied
    query = _last_query_index(messages)
    if query is None:
        return copied
    for i in range(query):
        if copied[i].get("role") == "assistant":
            copied[i] = _without_reasoning(copied[i], open_marker, close_marker)
    return copied


def _last_query_index(messages: list[dict[str, Any]]) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if message.get("role") == "user" and not _is_tool_result(message.get("content")):
            return i
    return None


def _is_tool_result(content: Any) -> bool:
    text = _text_of(content).strip()
    return text.startswith("<tool_response>") and text.endswith("</tool_response>")


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def _without_reasoning(message: dict[str, Any], open_marker: str, close_marker: str) -> dict[str, Any]:
    for name in _REASONING_FIELDS:
        message.pop(name, None)
    content = message.get("content")
    if isinstance(content, str):
        message["content"] = strip_think_blocks(content, open_marker, close_marker)
    elif isinstance(content, list):
        message["content"] = [
            {**part, "text": strip_think_blocks(part["text"], open_marker, close_marker)}
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
            else part
            for part in content
        ]
    return message


def strip_think_blocks(text: str, open_marker: str = THINK.open, close_marker: str = THINK.close) -> str:
    """`text` without its think blocks: closed ones, one left unclosed at the end,
    and a leading one whose opening marker was in the prompt (text up to a
    `</think>` that no `<think>` precedes). Whitespace after a leading block goes too.
    """
    if open_marker not in text and close_marker not in text:
        return text
    leading = False
    first_close, first_open = text.find(close_marker), text.find(open_marker)
    if first_close >= 0 and (first_open < 0 or first_close < first_open):
        text = text[first_close + len(close_marker) :]
        leading = True
    leading = leading or text.lstrip(_WS).startswith(open_marker)
    block = re.compile(re.escape(open_marker) + r".*?(?:" + re.escape(close_marker) + r"|\Z)", re.S)
    text = block.sub("", text)
    return text.lstrip(_WS) if leading else text
