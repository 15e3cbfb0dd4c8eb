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

from mlxcel.chat.continuation import PromptEnding
from mlxcel.chat.deltas import ParsedDelta, ToolCallDelta
from mlxcel.chat.media_parts import MediaIntake
from mlxcel.chat.output import ChatOutputParser, FinalChat
from mlxcel.chat.prompt import PreparedChat, prepare_chat
from mlxcel.chat.reasoning import extracts_reasoning
from mlxcel.engine.media_span import MediaLayout
from mlxcel.engine.request import FinishEvent, FinishReason, GenerationRequest, PromptProgressEvent, TokenEvent
from mlxcel.structured import request_grammar
from mlxcel.structured.errors import StructuredOutputError
from mlxcel.turn.context import RequestContext
from mlxcel.turn.errors import InvalidRequest, generation_error
from mlxcel.turn.generation import GenerationGroup
from mlxcel.turn.media_input import project_media
from mlxcel.turn.request_builder import TurnShaping, build_requests, seed_choices
from mlxcel.turn.sampling_fields import SamplingFields
from mlxcel.turn.structured_output import compile_forced_tool_call, compile_grammar, with_server_grammar

if TYPE_CHECKING:
    from mlxcel.turn.model_host import ModelHost

log = logging.getLogger("mlxcel.chat")
UNLIMITED_BUDGET = 2**31 - 1  # reasoning tokens: never reached
PREDICTION_CHARS_PER_TOKEN = 64  # more characters than any token holds: text past this many per slot cell is cut


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
    thinking_budget: int | None = None  # None or -1: the server's --reasoning-budget
    reasoning_budget_message: str | None = None  # None: the server's --reasoning-budget-message
    reasoning_format: str | None = None  # None: the server's --reasoning-format
    reasoning_control: bool = False  # the reasoning may be ended by a control request (engine.end_reasoning)
    ending: PromptEnding = field(default_factory=PromptEnding)  # generation prompt or continuation
    n: int = 1  # choices: independent generations of the same prompt
    prediction: str | None = None  # the reply the client expects (OpenAI's predicted output)
    max_tool_calls: int | None = None  # 1: parallel tool calls off (the generation ends at a second call)
    report_progress: bool = False  # the stream carries ChatProgress while the prompt prefills
    # llama-server's chat reply to a continued message is the whole message: the text
    # continued, then what was generated (Anthropic's reply is only the new text)
    reply_repeats_continued: bool = False

    def continued_text(self) -> str:
        """The final message's text a continuation carries on from ("" when none)."""
        mode = self.ending.continue_final
        if mode is None or not self.messages:
            return ""
        value = self.messages[-1].get(mode)
        if isinstance(value, list):
            value = "".join(part.get("text", "") for part in value if isinstance(part, dict))
        return value if isinstance(value, str) else ""


@dataclass
class ChatStep:
    """A streamed piece of output and the token it came from (None at the end)."""

    delta: ParsedDelta
    token: TokenEvent | None = None
    index: int = 0  # the choice


@dataclass
class ChatProgress:
    """Prefill progress of a choice (only when the spec asked for it)."""

    progress: PromptProgressEvent
    index: int = 0


@dataclass
class ChatOutcome:
    final: FinalChat
    finish: FinishEvent
    owed: list[ToolCallDelta]  # tool-call deltas a stream still has to send
    tail: ParsedDelta  # the last streamed piece (held-back text released at the end)
    tokens: list[TokenEvent] = field(default_factory=list)
    index: int = 0  # the choice

    @property
    def finish_reason(self) -> str:
        if self.finish.reason is FinishReason.ERROR:
            return "error"
        if self.finish.reason is FinishReason.LENGTH:
            return "length"  # a call max_tokens cut off is not one to run (llama-server's order too)
        return "tool_calls" if self.final.tool_calls else "stop"

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
        self.media = MediaLayout(())  # the prompt's media positions, once projected
        self._projected = prepared.media is None

    @classmethod
    def render(cls, host: ModelHost, spec: ChatTurnSpec) -> RenderedTurn:
        """Template and tokenizer: CPU work, so call it on a worker thread. The route's
        opening has checked that the model is ready. A prompt with media is not
        tokenized yet: `project` does that (`prepare` does both)."""
        modalities = host.modalities
        intake = MediaIntake(host.model_id, vision=modalities["vision"], audio=modalities["audio"])
        prepared = prepare_chat(host.template, host.tokenizer, spec.messages, spec.tools, spec.tool_choice,
                                spec.template_kwargs, spec.ending, intake)
        return cls(host, spec, prepared)

    @classmethod
    async def prepare(cls, host: ModelHost, spec: ChatTurnSpec) -> RenderedTurn:
        """Rendered (off the event loop) and, with media, projected: ready to count or build."""
        rendered = await asyncio.to_thread(cls.render, host, spec)
        await rendered.project()
        return rendered

    async def project(self) -> None:
        """Fetch, decode, tokenize and encode the prompt's media (nothing without)."""
        if self._projected:
            return
        projected = await project_media(self.host, self.prepared)
        self.prepared.tokens = projected.tokens
        self.media = MediaLayout(projected.spans)
        self._projected = True

    @property
    def prompt_tokens(self) -> int:
        if not self._projected:  # a blocking count of a prompt whose media was never loaded
            raise InvalidRequest("counting a prompt with media here is not supported")
        return len(self.prepared.tokens)

    async def build(self, context: RequestContext) -> ChatTurn:
        """The turn with its engine request complete (limits, sampling, constraint,
        logprobs, thinking budget), not yet submitted."""
        await self.project()
        host, spec, prepared = self.host, self.spec, self.prepared
        output = request_grammar(spec.grammar, spec.json_schema, spec.response_format)
        if not prepared.plan.tools:  # a tool-calling turn's output is parsed, not constrained by default
            output = with_server_grammar(output, (spec.grammar, spec.json_schema, spec.response_format),
                                         host.default_grammar)
        if spec.grammar and prepared.plan.tools:  # llama-server's rule and message
            raise InvalidRequest("Cannot use custom grammar constraints with tools.")
        if prepared.plan.forced and output is not None:
            raise InvalidRequest("a forced tool_choice cannot be combined with a constraining response_format")
        constraints = []  # a constraint holds one generation's state: one per choice
        for _ in range(spec.n):
            if prepared.plan.forced:
                constraints.append(await self._forced_call_constraint(context.request_id))
            else:
                constraints.append(await compile_grammar(host.tokenizer, output))
        prediction = await asyncio.to_thread(self._prediction_tokens) if spec.prediction else []
        group = GenerationGroup(host.engine)
        generations = build_requests(host, spec.sampling, [prepared.tokens] * spec.n, spec.max_tokens, context, group,
                                     self._shaping(constraints, prediction))
        for generation in generations:
            generation.report_progress = spec.report_progress
            generation.media = self.media
        seed_choices(generations, spec.n)
        return ChatTurn(self, context, group, generations)

    def _prediction_tokens(self) -> list[int]:
        """The predicted reply's tokens, at most a slot's context of them (more can never
        be drafted; cutting the text first keeps the tokenizing bounded too)."""
        slot_context = self.host.slot_context
        text = self.spec.prediction[: slot_context * PREDICTION_CHARS_PER_TOKEN]
        return self.host.tokenizer.encode(text, add_special=False, parse_special=False)[:slot_context]

    def _shaping(self, constraints: list, prediction: list[int]) -> TurnShaping:
        spec, prepared = self.spec, self.prepared
        shaping = TurnShaping(constraints=constraints, logprobs=spec.logprobs, prediction=prediction)
        config = self.host.config
        budget = spec.thinking_budget if spec.thinking_budget not in (None, -1) else config.reasoning_budget
        if budget < 0 and spec.reasoning_control:
            budget = UNLIMITED_BUDGET  # a budget that only a control request ends
        if budget >= 0 and prepared.parse_reasoning:
            markers = prepared.markers
            message = (spec.reasoning_budget_message if spec.reasoning_budget_message is not None
                       else config.reasoning_budget_message)
            shaping.reasoning_budget = budget
            shaping.reasoning_markers = (markers.open, markers.close)
            shaping.reasoning_close_tokens = self.host.tokenizer.encode(message + markers.close + "\n\n",
                                                                        add_special=False, parse_special=True)
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
    """A chat turn's generations (one per choice): submit them, then read them as a
    stream of parsed steps or whole; `cancel` ends them early."""

    def __init__(self, rendered: RenderedTurn, context: RequestContext, group: GenerationGroup,
                 generations: list[GenerationRequest]) -> None:
        self.rendered = rendered
        self.context = context
        self.generations = generations
        self._group = group
        prepared = rendered.prepared
        self._parsers = [
            ChatOutputParser(
                parse_reasoning=prepared.parse_reasoning and not rendered.host.config.skip_chat_parsing
                and extracts_reasoning(rendered.spec.reasoning_format or rendered.host.config.reasoning_format),
                start_in_reasoning=prepared.start_in_reasoning,
                tool_parser_cls=None if rendered.host.config.skip_chat_parsing else rendered.host.tool_parser_cls,
                tools=prepared.plan.tools,
                request_id=context.request_id,
                markers=prepared.markers,
                max_tool_calls=rendered.spec.max_tool_calls,
            )
            for _ in generations
        ]
        # what the reply repeats before the generated text, parsed as output is
        repeated = rendered.spec.continued_text() if rendered.spec.reply_repeats_continued else ""
        self._repeated = repeated
        self._stopped: set[int] = set()  # choices ended at a tool call past their limit
        self._pending = [parser.feed(repeated, token=False) if repeated else ParsedDelta() for parser in self._parsers]

    @property
    def generation(self) -> GenerationRequest:
        return self.generations[0]

    @classmethod
    async def start(cls, host: ModelHost, spec: ChatTurnSpec, context: RequestContext) -> ChatTurn:
        """Render (off the event loop), build and submit: the turn every chat-shaped
        API runs."""
        rendered = await RenderedTurn.prepare(host, spec)
        turn = await rendered.build(context)
        turn.submit()
        return turn

    @property
    def prompt_tokens(self) -> int:
        return self.rendered.prompt_tokens

    def submit(self) -> None:
        self._group.submit(self.generations)

    def cancel(self) -> None:
        """Stop the generation; its stream or run then ends with FinishReason.CANCELLED."""
        self._group.cancel()

    def _take_pending(self, index: int, delta: ParsedDelta) -> ParsedDelta:
        """The continued text's delta goes out with the choice's first piece."""
        pending = self._pending[index]
        if not pending:
            return delta
        self._pending[index] = ParsedDelta()
        pending.extend(delta)
        return pending

    def _outcome(self, finish: FinishEvent, index: int) -> ChatOutcome:
        parser = self._parsers[index]
        tail = self._take_pending(index, parser.feed(finish.text, token=False))
        tail.extend(parser.finish())
        final, owed = parser.final()
        self._check_forced(final)
        return ChatOutcome(final=final, finish=finish, owed=owed, tail=tail, index=index)

    def _check_forced(self, final: FinalChat) -> None:
        if self.rendered.prepared.plan.forced and not final.tool_calls:
            log.warning("request %s: tool_choice forced a call but the generation ended without one",
                        self.context.request_id)

    async def stream(self) -> AsyncIterator[ChatStep | ChatProgress | ChatOutcome]:
        """Per choice: a ChatStep per generated token (its delta may be empty while
        markup or a partial marker is held back), then its ChatOutcome; choices
        interleave. ChatProgress comes only when the spec asked for it."""
        async for index, event in self._group.events():
            if isinstance(event, TokenEvent):
                parser = self._parsers[index]
                step = ChatStep(self._take_pending(index, parser.feed(event.text)), event, index)
                if parser.over_limit and index not in self._stopped:  # a call past the limit began
                    self._stopped.add(index)  # the output is complete
                    self._group.stop(index)
                yield step
            elif isinstance(event, PromptProgressEvent):
                yield ChatProgress(event, index)
            else:
                yield self._outcome(event, index)

    async def run(self) -> ChatOutcome:
        """The whole turn (its first choice), parsed once. A failed generation raises
        its typed error."""
        return (await self.run_all())[0]

    async def run_all(self) -> list[ChatOutcome]:
        """Every choice, in order, each parsed once."""
        if self.rendered.spec.max_tool_calls is not None and self.rendered.prepared.plan.tools:
            return await self._run_parsing()
        results = await self._group.collect()
        outcomes = []
        for index, (result, parser) in enumerate(zip(results, self._parsers)):
            if result.finish.reason is FinishReason.ERROR:
                raise generation_error(result.finish)
            # after the continued text fed at construction
            parser.add_text(result.text, [len(event.text) for event in result.events])
            final, _ = parser.final()
            self._check_forced(final)
            outcomes.append(ChatOutcome(final=final, finish=result.finish, owed=[], tail=ParsedDelta(),
                                        tokens=result.events, index=index))
        return outcomes

    async def _run_parsing(self) -> list[ChatOutcome]:
        """`run_all` through the streaming parse, which sees a call past the limit begin
        (and ends the generation there)."""
        tokens: list[list[TokenEvent]] = [[] for _ in self.generations]
        outcomes: list[ChatOutcome | None] = [None] * len(self.generations)
        async for step in self.stream():
            if isinstance(step, ChatStep):
                tokens[step.index].append(step.token)
            elif isinstance(step, ChatOutcome):
                if step.finish.reason is FinishReason.ERROR:
                    raise generation_error(step.finish)
                step.tokens = tokens[step.index]
                outcomes[step.index] = step
        return outcomes


def count_prompt_tokens(host: ModelHost, spec: ChatTurnSpec) -> int:
    """The prompt tokens a spec renders to (blocking: call it on a worker thread; a
    prompt with media needs `RenderedTurn.prepare` instead)."""
    return RenderedTurn.render(host, spec).prompt_tokens
