"""One chat turn on the engine, shared by every chat-shaped API (OpenAI chat,
Responses, Anthropic): the prompt prepared from normalised messages, the engine
request built and submitted, and the output parsed into content, reasoning and tool
calls, streamed or whole. Each API only translates its wire format to a
`ChatTurnSpec` and the parsed output back."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi import Request

from mlxcel.chat.deltas import ParsedDelta, ToolCallDelta
from mlxcel.chat.output import ChatOutputParser, FinalChat
from mlxcel.chat.prompt import PreparedChat, prepare_chat
from mlxcel.engine.request import FinishEvent, FinishReason, GenerationRequest, TokenEvent
from mlxcel.protocol.sampling_fields import SamplingFields
from mlxcel.server.errors import generation_error, invalid_request
from mlxcel.server.generation import GenerationGroup
from mlxcel.server.request_builder import build_requests
from mlxcel.server.structured_output import compile_forced_tool_call, compile_response_format, is_constraining
from mlxcel.structured.errors import StructuredOutputError

if TYPE_CHECKING:
    from mlxcel.server.model_host import ModelHost

log = logging.getLogger("mlxcel.chat")


@dataclass
class ChatTurnSpec:
    messages: list[dict]  # role/content dicts; content a string or text parts
    sampling: SamplingFields  # validated request fields: sampling, stop, cache_prompt ...
    tools: list[dict] = field(default_factory=list)  # OpenAI function-tool shape
    tool_choice: Any = None
    response_format: dict | None = None
    template_kwargs: dict = field(default_factory=dict)
    max_tokens: int | None = None
    logprobs: int | None = None  # None: off; k: top-k alternatives per token
    thinking_budget: int | None = None


@dataclass
class ChatStep:
    """A streamed piece of output and the token it came from (None at the end)."""

    delta: ParsedDelta
    token: TokenEvent | None = None


@dataclass
class ChatOutcome:
    final: FinalChat
    finish: FinishEvent
    owed: list[ToolCallDelta]  # tool-call deltas a stream still has to send
    tail: ParsedDelta  # the last streamed piece (held-back text released at the end)
    tokens: list[TokenEvent] = field(default_factory=list)

    @property
    def finish_reason(self) -> str:
        if self.finish.reason is FinishReason.ERROR:
            return "error"
        if self.final.tool_calls:
            return "tool_calls"
        return "length" if self.finish.reason is FinishReason.LENGTH else "stop"

    @property
    def reasoning_only(self) -> bool:
        """Tokens came, but all stayed in the reasoning channel (the spec's flag)."""
        f = self.final
        return self.finish.completion_tokens > 0 and not f.content and not f.tool_calls and bool(f.reasoning)


class ChatTurn:
    def __init__(self, host: ModelHost, spec: ChatTurnSpec, prepared: PreparedChat, request_id: str) -> None:
        self.host = host
        self.spec = spec
        self.prepared = prepared
        self.request_id = request_id
        self.generation: GenerationRequest | None = None
        self._group: GenerationGroup | None = None
        self._parser = ChatOutputParser(
            parse_reasoning=prepared.parse_reasoning,
            start_in_reasoning=prepared.start_in_reasoning,
            tool_parser_cls=host.tool_parser_cls,
            tools=prepared.plan.tools,
            request_id=request_id,
            markers=prepared.markers,
        )

    @classmethod
    def render(cls, host: ModelHost, spec: ChatTurnSpec, request_id: str) -> ChatTurn:
        """Prepare the prompt only (enough to count its tokens)."""
        _, tokenizer = host.require_ready()
        prepared = prepare_chat(host.template, tokenizer, spec.messages, spec.tools, spec.tool_choice,
                                spec.template_kwargs)
        return cls(host, spec, prepared, request_id)

    @classmethod
    async def start(cls, host: ModelHost, http_request: Request, spec: ChatTurnSpec, request_id: str) -> ChatTurn:
        """Render, build and submit: a turn whose generation is under way."""
        rendered = await asyncio.to_thread(cls.render, host, spec, request_id)  # CPU work: off the event loop
        turn = await rendered.build(http_request)
        turn.submit()
        return turn

    @property
    def prompt_tokens(self) -> int:
        return len(self.prepared.tokens)

    async def build(self, http_request: Request) -> ChatTurn:
        """Build the engine request: limits, sampling, constraints, thinking budget."""
        host, spec, prepared = self.host, self.spec, self.prepared
        tokenizer = host.tokenizer
        if prepared.plan.forced and is_constraining(spec.response_format):
            raise invalid_request("a forced tool_choice cannot be combined with a constraining response_format")
        (generation,) = build_requests(host, http_request, spec.sampling, [prepared.tokens], spec.max_tokens)
        if prepared.plan.forced:
            generation.constraint = await self._forced_call_constraint()
        else:
            generation.constraint = await compile_response_format(tokenizer, spec.response_format)
        generation.logprobs = spec.logprobs
        if spec.thinking_budget is not None and spec.thinking_budget >= 0 and prepared.parse_reasoning:
            markers = prepared.markers
            generation.reasoning_budget = spec.thinking_budget
            generation.reasoning_markers = (markers.open, markers.close)
            generation.reasoning_close_tokens = tokenizer.encode(markers.close + "\n\n", add_special=False,
                                                                 parse_special=True)
            generation.reasoning_open_at_start = prepared.start_in_reasoning
        self.generation = generation
        return self

    def cancel(self) -> None:
        """Stop the generation; its stream or run then ends with FinishReason.CANCELLED."""
        if self._group is not None:
            self._group.cancel()

    async def _forced_call_constraint(self):
        """On JSON-wrapper formats a forced tool_choice is also a grammar, so the call
        comes; other formats (or schemas the grammar engine cannot express) get the
        instruction only."""
        parser_cls = self.host.tool_parser_cls
        if parser_cls is None or not parser_cls.json_wrapper:
            return None
        tools = self.prepared.plan.tools
        description = parser_cls(tools).call_grammar(tools)
        if description is None:
            return None
        try:
            return await compile_forced_tool_call(self.host.tokenizer, description)
        except StructuredOutputError as exc:
            log.warning("request %s: forced tool_choice left unconstrained: %s", self.request_id, exc)
            return None

    def submit(self) -> None:
        assert self.generation is not None, "build() first"
        self._group = GenerationGroup(self.host.engine, [self.generation])
        self._group.submit()

    def _outcome(self, finish: FinishEvent, tokens: list[TokenEvent]) -> ChatOutcome:
        tail = self._parser.feed(finish.text)
        tail.extend(self._parser.finish())
        final, owed = self._parser.final()
        if self.prepared.plan.forced and not final.tool_calls:
            log.warning("request %s: tool_choice forced a call but the generation ended without one",
                        self.request_id)
        return ChatOutcome(final=final, finish=finish, owed=owed, tail=tail, tokens=tokens)

    async def stream(self) -> AsyncIterator[ChatStep | ChatOutcome]:
        """A ChatStep per generated token (its delta may be empty while markup or a
        partial marker is held back), then the ChatOutcome."""
        async for _, event in self._group.events():
            if isinstance(event, TokenEvent):
                yield ChatStep(self._parser.feed(event.text), event)
            else:
                yield self._outcome(event, [])

    async def run(self, http_request: Request | None) -> ChatOutcome:
        """The whole turn; a client that disconnects cancels it. Engine errors are 500s."""
        (result,) = await self._group.collect(http_request)
        if result.finish.reason is FinishReason.ERROR:
            raise generation_error(result.finish)
        self._parser.feed("".join(event.text for event in result.events))
        return self._outcome(result.finish, result.events)
