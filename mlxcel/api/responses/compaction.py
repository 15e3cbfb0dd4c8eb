"""Compaction: earlier turns summarized into one compaction item.

The history (compaction items replayed) splits into the system and developer
messages, which are kept, the older turns, which are summarized, and the retained
turns: the latest user message and the newest whole turns within `keep_tokens`. A
split falls only before a user message or after a completed tool group, so a function
call never leaves its output; an earlier summary is always summarized again. The
summary is one non-streaming generation. A history longer than one context window, a
summary that does not fit, or a result that is not shorter fails with 400
context_length_exceeded, and nothing changes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from mlxcel.api.responses.capsule import Capsule, encode_capsule
from mlxcel.api.responses.input_items import SUMMARY_MARK, content_string, is_system, is_user, item_kind, replay
from mlxcel.api.responses.wire import compaction_item, new_id
from mlxcel.engine.request import FinishReason
from mlxcel.turn.chat_turn import ChatTurn, ChatTurnSpec, RenderedTurn
from mlxcel.turn.context import RequestContext
from mlxcel.turn.errors import InvalidRequest
from mlxcel.turn.sampling_fields import SamplingFields

DEFAULT_SUMMARY_TOKENS = 1024
KEEP_TOKENS_CAP = 8192
ITEM_OVERHEAD_TOKENS = 4  # role markers around an item, roughly
SUMMARIZER = (
    "You compress conversations. Summarize the conversation below so that it can be continued from your summary "
    "alone: keep the user's goals, facts, names, numbers, decisions, tool results and open tasks. "
    "Reply with the summary only."
)


def default_keep_tokens(n_ctx_slot: int) -> int:
    return max(1, min(n_ctx_slot // 16, KEEP_TOKENS_CAP))


def too_long(message: str) -> InvalidRequest:
    return InvalidRequest(message, code="context_length_exceeded")


class NothingToCompact(InvalidRequest):
    """No turn is old enough to summarize (the latest user message is always kept)."""

    def __init__(self) -> None:
        super().__init__("compaction would not shorten the input: there are no earlier turns to summarize",
                         code="context_length_exceeded")


@dataclass
class HistorySplit:
    system: list[dict]  # kept
    older: list[dict]  # summarized
    retained: list[dict]  # kept after the summary


def _is_summary(item: dict) -> bool:
    return bool(item.get(SUMMARY_MARK))


def _call_key(item: dict) -> str | None:
    call_id = item.get("call_id")
    return call_id if isinstance(call_id, str) else None


def valid_splits(turns: list[dict]) -> list[int]:
    """Positions i (turns[:i] summarized, turns[i:] kept) before a user message or
    after a completed tool group, with no call on one side and its output on the
    other, and after any earlier summary. Linear: a call whose first call is at c and
    whose last output is at o rules out the splits c < i <= o, marked as a range."""
    n = len(turns)
    floor = max((i + 1 for i, t in enumerate(turns) if _is_summary(t)), default=0)
    first_call: dict[str | None, int] = {}
    last_output: dict[str | None, int] = {}
    for i, t in enumerate(turns):
        kind = item_kind(t)
        if kind == "function_call":
            first_call.setdefault(_call_key(t), i)
        elif kind == "function_call_output":
            last_output[_call_key(t)] = i
    open_calls = [0] * (n + 2)  # difference array: calls open across a split at i
    for key, call_at in first_call.items():
        output_at = last_output.get(key, -1)
        if call_at < output_at:
            open_calls[call_at + 1] += 1
            open_calls[output_at + 1] -= 1
    out = []
    crossing = sum(open_calls[:max(floor, 1)])
    for i in range(max(floor, 1), n + 1):
        crossing += open_calls[i]
        before_user = i < n and is_user(turns[i])
        after_tools = item_kind(turns[i - 1]) == "function_call_output"
        if (before_user or after_tools) and crossing == 0:
            out.append(i)
    return out


def split_history(items: list[dict], keep_tokens: int, item_tokens: Callable[[dict], int]) -> HistorySplit:
    """`items` already replayed. The split keeps the latest user message and then as
    many newer whole turns as fit `keep_tokens`. Items are sized from the newest back,
    and only as far as `keep_tokens` reaches."""
    system = [i for i in items if is_system(i) and not _is_summary(i)]
    turns = [i for i in items if not (is_system(i) and not _is_summary(i))]
    splits = valid_splits(turns)
    last_user = max((i for i, t in enumerate(turns) if is_user(t)), default=None)
    if last_user is not None:
        splits = [s for s in splits if s <= last_user]
    if not splits:
        return HistorySplit(system, [], turns)
    chosen = splits[-1]  # the fewest turns kept: at least the latest user message
    kept_tokens, sized_from = 0, len(turns)  # tokens of turns[sized_from:]
    for s in reversed(splits):
        while sized_from > s and kept_tokens <= keep_tokens:
            sized_from -= 1
            kept_tokens += item_tokens(turns[sized_from])
        if sized_from > s or kept_tokens > keep_tokens:
            break
        chosen = s
    return HistorySplit(system, turns[:chosen], turns[chosen:])


def item_text(item: dict) -> str:
    """An item as a line of the transcript the summarizer reads."""
    kind = item_kind(item)
    if kind == "message":
        role = item.get("role", "user")
        text = content_string(item.get("content"), role, "item", describe_media=True)
        return text if _is_summary(item) else f"{role}: {text}"
    if kind == "function_call":
        return f"assistant called {item.get('name')}({item.get('arguments', '')})"
    if kind == "function_call_output":
        output = item.get("output")
        text = output if isinstance(output, str) else content_string(output, "tool", "item", describe_media=True,
                                                                    field="output")
        return f"tool result for {item.get('call_id')}: {text}"
    return ""


@dataclass
class Compaction:
    items: list[dict]  # the new history: kept system messages, retained items, the compaction item
    item: dict  # the compaction item
    summary_input_tokens: int
    summary_output_tokens: int
    tokens_before: int
    tokens_after: int


class Compactor:
    """Compacts one history on the model `host`. `count` renders a history the way
    the request would (instructions, tools) and counts its tokens."""

    def __init__(self, host, sampling: SamplingFields, template_kwargs: dict, count: Callable[[list[dict]], int],
                 context: RequestContext) -> None:
        self.host = host
        self.sampling = sampling
        self.template_kwargs = template_kwargs
        self.count = count
        self.context = context
        self.turn: ChatTurn | None = None  # the summary being generated

    def cancel(self) -> None:
        if self.turn is not None:
            self.turn.cancel()

    def _item_tokens(self, item: dict) -> int:
        return len(self.host.tokenizer.encode(item_text(item), add_special=False, parse_special=False)) + \
            ITEM_OVERHEAD_TOKENS

    async def compact(self, items: list[dict], keep_tokens: int | None = None, max_output_tokens: int | None = None,
                      tokens_before: int | None = None) -> Compaction:
        """Counting, splitting and rendering run on a worker thread, off the event loop."""
        n_ctx = self.host.slot_context
        before = await asyncio.to_thread(self.count, items) if tokens_before is None else tokens_before
        split = await asyncio.to_thread(self._split, items, keep_tokens or default_keep_tokens(n_ctx))
        if not split.older:
            raise NothingToCompact()
        summary, n_in, n_out = await self._summarize(split.older, max_output_tokens or DEFAULT_SUMMARY_TOKENS)
        item = compaction_item(new_id("cmp"), encode_capsule(Capsule(summary, split.retained)))
        compacted = [*split.system, *split.retained, item]
        after = await asyncio.to_thread(self.count, compacted)
        if after >= before:
            raise too_long(f"compaction would not shorten the input ({before} tokens before, {after} after)")
        return Compaction(compacted, item, n_in, n_out, before, after)

    def _split(self, items: list[dict], keep_tokens: int) -> HistorySplit:
        return split_history(replay(items), keep_tokens, self._item_tokens)

    def _render_summary(self, older: list[dict]) -> tuple[ChatTurnSpec, RenderedTurn]:
        transcript = "\n\n".join(t for t in (item_text(i) for i in older) if t)
        messages = [{"role": "system", "content": SUMMARIZER}, {"role": "user", "content": transcript}]
        spec = ChatTurnSpec(messages=messages, sampling=self.sampling, template_kwargs=self.template_kwargs)
        return spec, RenderedTurn.render(self.host, spec)

    async def _summarize(self, older: list[dict], max_tokens: int) -> tuple[str, int, int]:
        spec, turn = await asyncio.to_thread(self._render_summary, older)
        n_ctx = self.host.slot_context
        room = n_ctx - turn.prompt_tokens - 1
        if turn.prompt_tokens >= n_ctx:
            raise too_long(f"the history to summarize ({turn.prompt_tokens} tokens) is longer than one context "
                           f"window ({n_ctx} tokens)")
        if room < 1:
            raise too_long("the summary does not fit the context window after the history")
        spec.max_tokens = min(max_tokens, room)
        self.turn = await turn.build(self.context)
        self.turn.submit()
        outcome = await self.turn.run()
        if outcome.finish.reason is FinishReason.LENGTH and spec.max_tokens < max_tokens:
            raise too_long("the summary does not fit the context window after the history")
        summary = outcome.final.content.strip() or outcome.final.reasoning.strip()
        return summary, outcome.finish.prompt_tokens, outcome.finish.completion_tokens
