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

from mlxcel.chat.deltas import ParsedDelta, ToolCallDelta
from mlxcel.chat.output import ChatOutputParser, FinalChat
from mlxcel.chat.prompt import PreparedChat, prepare_chat
from mlxcel.engine.request import FinishEvent, FinishReason, GenerationRequest, TokenEvent
from mlxcel.structured import request_grammar
from mlxcel.structured.errors import StructuredOutputError
from mlxcel.turn.context import RequestContext
from mlxcel.turn.errors import InvalidRequest, generation_error
from mlxcel.turn.generation import GenerationGroup
from mlxcel.turn.request_builder import TurnShaping, build_requests
from mlxcel.turn.sampling_fields import SamplingFields
from mlxcel.turn.structured_output import compile_forced_tool_call, compile_grammar

if TYPE_CHECKING:
    from mlxcel.turn.model_host import ModelHost

log = logging.getLogger("mlxcel.chat")


@dataclass
class ChatTurnSpec:
    messages: list[dict]  # role/content dicts; content a string or text parts
    sampling: SamplingFields  # validated request fields: sampling, stop, cache_prompt ...
    tools: list[dict] = field(default_factory=list)  # OpenAI function-tool shape
    tool_choice: Any = None
    response_format: dict | None = None
    grammar: str | None = None  # llama-server's GBNF field (chat accepts it too)
    json_schema: dict | None = None  # llama-server's bare schema field
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


class RenderedTurn:
    """A chat turn's prompt, rendered and tokenized (enough to count its tokens);
    `build` makes it a ChatTurn ready to submit."""

    def __init__(self, host: ModelHost, spec: ChatTurnSpec, prepared: PreparedChat) -> None:
        self.host = host
        self.spec = spec
        self.prepared = prepared

    @classmethod
    def render(cls, host: ModelHost, spec: ChatTurnSpec) -> RenderedTurn:
        """Template and tokenizer: CPU work, so call it on a worker thread. The route's
        opening has checked that the model is ready."""
        prepared = prepare_chat(host.template, host.tokenizer, spec.messages, spec.tools, spec.tool_choice,
                                spec.template_kwargs)
        return cls(host, spec, prepared)

    @property
    def prompt_tokens(self) -> int:
        return len(self.prepared.tokens)

    async def build(self, context: RequestContext) -> ChatTurn:
        """The turn with its engine request complete (limits, sampling, constraint,
        logprobs, thinking budget), not yet submitted."""
        host, spec, prepared = self.host, self.spec, self.prepared
        output = request_grammar(spec.grammar, spec.json_schema, spec.response_format)
        if spec.grammar and prepared.plan.tools:  # llama-server's rule and message
            raise InvalidRequest("Cannot use custom grammar constraints with tools.")
        if prepared.plan.forced and output is not None:
            raise InvalidRequest("a forced tool_choice cannot be combined with a constraining response_format")
        if prepared.plan.forced:
            constraint = await self._forced_call_constraint(context.request_id)
        else:
            constraint = await compile_grammar(host.tokenizer, output)
        group = GenerationGroup(host.engine)
        (generation,) = build_requests(host, spec.sampling, [prepared.tokens], spec.max_tokens, context, group,
                                       self._shaping(constraint))
        return ChatTurn(self, context, group, generation)

    def _shaping(self, constraint) -> TurnShaping:
        spec, prepared = self.spec, self.prepared
        shaping = TurnShaping(constraints=[constraint], logprobs=spec.logprobs)
        if spec.thinking_budget is not None and spec.thinking_budget >= 0 and prepared.parse_reasoning:
            markers = prepared.markers
            shaping.reasoning_budget = spec.thinking_budget
            shaping.reasoning_markers = (markers.open, markers.close)
            shaping.reasoning_close_tokens = self.host.tokenizer.encode(markers.close + "\n\n", add_special=False,
                                                                        parse_special=True)
            shaping.reasoning_open_at_start = prepared.start_in_reasoning
        return shaping

    async def _forced_call_constraint(self, request_id: str):
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
            log.warning("request %s: forced tool_choice left unconstrained: %s", request_id, exc)
            return None


class ChatTurn:
    """A chat turn's generation: submit it, then read it as a stream of parsed steps
    or whole; `cancel` ends it early."""

    def __init__(self, rendered: RenderedTurn, context: RequestContext, group: GenerationGroup,
                 generation: GenerationRequest) -> None:
        self.rendered = rendered
        self.context = context
        self.generation = generation
        self._group = group
        prepared = rendered.prepared
        self._parser = ChatOutputParser(
            parse_reasoning=prepared.parse_reasoning,
            start_in_reasoning=prepared.start_in_reasoning,
            tool_parser_cls=rendered.host.tool_parser_cls,
            tools=prepared.plan.tools,
            request_id=context.request_id,
            markers=prepared.markers,
        )

    @classmethod
    async def start(cls, host: ModelHost, spec: ChatTurnSpec, context: RequestContext) -> ChatTurn:
        """Render (off the event loop), build and submit: the turn every chat-shaped
        API runs."""
        rendered = await asyncio.to_thread(RenderedTurn.render, host, spec)
        turn = await rendered.build(context)
        turn.submit()
        return turn

    @property
    def prompt_tokens(self) -> int:
        return self.rendered.prompt_tokens

    def submit(self) -> None:
        self._group.submit([self.generation])

    def cancel(self) -> None:
        """Stop the generation; its stream or run then ends with FinishReason.CANCELLED."""
        self._group.cancel()

    def _outcome(self, finish: FinishEvent) -> ChatOutcome:
        tail = self._parser.feed(finish.text)
        tail.extend(self._parser.finish())
        final, owed = self._parser.final()
        self._check_forced(final)
        return ChatOutcome(final=final, finish=finish, owed=owed, tail=tail)

    def _check_forced(self, final: FinalChat) -> None:
        if self.rendered.prepared.plan.forced and not final.tool_calls:
            log.warning("request %s: tool_choice forced a call but the generation ended without one",
                        self.context.request_id)

    async def stream(self) -> AsyncIterator[ChatStep | ChatOutcome]:
        """A ChatStep per generated token (its delta may be empty while markup or a
        partial marker is held back), then the ChatOutcome."""
        async for _, event in self._group.events():
            if isinstance(event, TokenEvent):
                yield ChatStep(self._parser.feed(event.text), event)
            else:
                yield self._outcome(event)

    async def run(self) -> ChatOutcome:
        """The whole turn, parsed once. A failed generation raises its typed error."""
        (result,) = await self._group.collect()
        if result.finish.reason is FinishReason.ERROR:
            raise generation_error(result.finish)
        self._parser.add_text(result.text)
        final, _ = self._parser.final()
        self._check_forced(final)
        return ChatOutcome(final=final, finish=result.finish, owed=[], tail=ParsedDelta(), tokens=result.events)


def count_prompt_tokens(host: ModelHost, spec: ChatTurnSpec) -> int:
    """The prompt tokens a spec renders to (blocking: call it on a worker thread)."""
    return RenderedTurn.render(host, spec).prompt_tokens
