"""One response: its history resolved (previous_response_id or conversation, then the
input), compacted when its context_management says so, generated as a ChatTurn, its
output built as typed events, and the result recorded (store, conversation,
reasoning echo).

Histories are read from the state store on its own threads (`store_calls`), and
translated, rendered and tokenized on a worker thread (`asyncio.to_thread`), so
neither a long history nor a slow store stalls other requests. Everything it stores
belongs to `owner`, the API key's digest."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from mlxcel.api.responses.compaction import Compaction, Compactor, NothingToCompact
from mlxcel.api.responses.events import EventSequence, OutputBuilder
from mlxcel.api.responses.input_items import as_items
from mlxcel.api.responses.json_safe import is_json_safe, json_safe
from mlxcel.api.responses.records import ResponseRecord
from mlxcel.api.responses.store_calls import in_store_thread
from mlxcel.api.responses.translate import check_request, conversation_id, turn_spec
from mlxcel.api.responses.wire import ContextManagement, ResponsesRequest, response_object, usage_body
from mlxcel.chat.deltas import ParsedDelta
from mlxcel.chat.errors import ChatInputError
from mlxcel.engine.request import Failure, FinishEvent, FinishReason
from mlxcel.state.store import StateUnavailable, json_size
from mlxcel.turn.chat_logprobs import LogprobFormatter
from mlxcel.turn.chat_turn import ChatOutcome, ChatProgress, ChatTurn, ChatTurnSpec, RenderedTurn, count_prompt_tokens
from mlxcel.turn.context import RequestContext
from mlxcel.turn.errors import GenerationFailed, InvalidRequest, NotFound, TurnError, generation_error
from mlxcel.turn.live_timings import LiveTimings

if TYPE_CHECKING:
    from mlxcel.api.responses.state import ResponsesState
    from mlxcel.turn.model_host import ModelHost

log = logging.getLogger("mlxcel.responses")
TERMINAL_EVENTS = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "cancelled": "response.incomplete",
    "failed": "response.failed",
}
# failures of a finished generation that are the request's doing: the error they are
CLIENT_FAILURES = {"conversation_too_large": InvalidRequest, "conversation_not_found": NotFound}
UNENCODABLE = "the response cannot be encoded as JSON (a lone surrogate or a non-finite number)"


@dataclass
class CompactionPolicy:
    threshold: int | None
    keep_tokens: int | None
    summary_tokens: int | None


def compaction_policy(entries: list[ContextManagement] | None) -> CompactionPolicy | None:
    policy = None
    for i, entry in enumerate(entries or []):
        if entry.type != "compaction":
            raise ChatInputError(f"context_management[{i}].type {entry.type!r} is not supported: only 'compaction' is")
        policy = policy or CompactionPolicy(entry.compact_threshold, entry.keep_tokens, entry.max_output_tokens)
    return policy


class ResponseRun:
    def __init__(self, state: ResponsesState, host: ModelHost, data: dict, body: ResponsesRequest,
                 context: RequestContext) -> None:
        self.state = state
        self.host = host
        self.data = data
        self.body = body
        self.id = context.request_id
        self.context = context
        self.owner = context.owner
        self.created_at = int(time.time())
        self.background = body.background
        self.policy = compaction_policy(body.context_management)
        self.conversation = conversation_id(body)
        self.history: list[dict] = []  # what the output continues: prior history, then the input
        self.size = 0  # rough bytes of the request and its history (a background job's admission)
        self.spec: ChatTurnSpec | None = None
        self.turn: ChatTurn | None = None  # built by ready(); submitted by whoever runs it
        self._compactor: Compactor | None = None
        self.compaction: Compaction | None = None
        self.final: dict | None = None
        self.finished = asyncio.Event()  # set once `final` is recorded
        self.failed_generation: FinishEvent | None = None  # the engine's error, when generation failed
        self.conversation_base: list[dict] | None = None  # the transcript read at the start (conversation)
        self._recording = threading.RLock()  # the final object is recorded once, on whichever thread
        self._recorded: dict | None = None

    # -- before generation ----------------------------------------------------------

    async def translate(self) -> None:
        """History and chat turn; every problem with the request is a 400 here."""
        check_request(self.body)
        prior: list[dict] = []
        if self.body.previous_response_id:  # read (and decoded) from the state store off the event loop
            prior = await in_store_thread(self.state.previous_history, self.body.previous_response_id, self.owner)
        elif self.conversation:
            prior = await in_store_thread(self.state.records.conversation_history, self.conversation, self.owner)
            self.conversation_base = prior
        await asyncio.to_thread(self._prepare, prior)

    def _prepare(self, prior: list[dict]) -> None:
        if not is_json_safe(response_object(self.id, self.created_at, "", self.body, "queued")):
            raise ChatInputError("the request holds text that is not valid Unicode (a lone surrogate?) or a "
                                 "non-finite number in a field the response echoes")
        self.history = prior + as_items(self.body.input)
        self.spec = self._spec(self.history)
        if self.background:
            self.size = json_size(self.data, self.history)

    def _spec(self, history: list[dict]) -> ChatTurnSpec:
        return turn_spec(self.data, self.body, history, self.host.config.chat_template_kwargs,
                         self.state.records.reasoning_echo.lookup)

    def count(self, history: list[dict]) -> int:
        """Rendered input tokens of a history, as /v1/responses/input_tokens counts them
        (a blocking call: run it on a worker thread)."""
        return count_prompt_tokens(self.host, self._spec(history))

    async def ready(self) -> None:
        """Compaction when due, the conversation's byte budget (400 when the history
        alone is over it), then the engine request (limits, constraint)."""
        turn = await RenderedTurn.prepare(self.host, self.spec)
        if self.policy is not None:
            turn = await self._compact_if_due(turn)
            room = self.host.slot_context - turn.prompt_tokens - 1
            if room >= 1:
                self.spec.max_tokens = min(self.spec.max_tokens or room, room)
        if self.conversation is not None:
            await in_store_thread(self.state.records.check_conversation_size, self.conversation, self.history)
        self.turn = await turn.build(self.context)

    def cancel(self) -> None:
        """Stop whatever runs for this response now: its summary, or its generation."""
        if self._compactor is not None:
            self._compactor.cancel()
        if self.turn is not None:
            self.turn.cancel()

    async def _compact_if_due(self, turn: RenderedTurn) -> RenderedTurn:
        n = turn.prompt_tokens
        full = n + 1 >= self.host.slot_context
        if not full and (self.policy.threshold is None or n < self.policy.threshold):
            return turn
        self._compactor = Compactor(self.host, self.body, self.spec.template_kwargs, self.count,
                                    replace(self.context, request_id=f"{self.id}-compaction"))
        try:
            self.compaction = await self._compactor.compact(self.history, self.policy.keep_tokens, self.policy.summary_tokens,
                                                      tokens_before=n)
        except NothingToCompact:
            if full:
                raise
            return turn  # the threshold is reached, but there is nothing older to summarize
        self.history = self.compaction.items
        self.spec = await asyncio.to_thread(self._spec, self.history)
        return await RenderedTurn.prepare(self.host, self.spec)

    # -- generation ---------------------------------------------------------------

    def snapshot(self, status: str) -> dict:
        return json_safe(response_object(self.id, self.created_at, self.host.model_id, self.body, status,
                                         conversation_id=self.conversation))

    async def events(self) -> AsyncIterator[dict]:
        """The typed events of the whole response (the turn already submitted);
        `final` holds the recorded response object at the end."""
        event = EventSequence()
        snapshot = self.snapshot("in_progress")
        yield event("response.created", response=snapshot)
        yield event("response.in_progress", response=snapshot)
        prefix: list[dict] = []
        if self.compaction is not None:
            c = self.compaction
            yield event("mlx.compaction.started", response_id=self.id, input_tokens=c.tokens_before)
            yield event("mlx.compaction.completed", response_id=self.id, input_tokens_before=c.tokens_before,
                        input_tokens_after=c.tokens_after)
            yield event("response.output_item.added", output_index=0, item=c.item)
            yield event("response.output_item.done", output_index=0, item=c.item)
            prefix.append(c.item)
        builder = OutputBuilder(event, len(prefix))
        formatter = LogprobFormatter(self.host.tokenizer) if self.spec.logprobs is not None else None
        outcome: ChatOutcome | None = None
        timings = LiveTimings() if self.body.timings_per_token else None
        async for step in self.turn.stream():
            if isinstance(step, ChatOutcome):
                outcome = step
                break
            if isinstance(step, ChatProgress):
                if timings is not None:
                    timings.progress(step.progress)
                if self.body.return_progress:
                    yield progress_event(event, snapshot, step.progress, timings)
                continue
            if timings is not None:
                timings.token()
            entries = [formatter.entry(step.token)] if formatter is not None and step.token is not None else None
            events = builder.feed(step.delta, entries)
            if events and timings is not None:  # llama-server puts them on a token's last event
                events[-1]["timings"] = timings.to_dict()
            for e in events:
                yield e
        for delta in (outcome.tail, ParsedDelta(tool_calls=outcome.owed)):
            for e in builder.feed(delta):
                yield e
        calls = outcome.final.tool_calls  # one at most with parallel_tool_calls false: the turn stops there
        status, details, error = _status(outcome.finish)
        if outcome.finish.reason is FinishReason.ERROR:
            self.failed_generation = outcome.finish
        for e in builder.finish(calls, status):
            yield e
        usage = usage_body(outcome.finish.prompt_tokens, outcome.finish.completion_tokens,
                           outcome.finish.cached_tokens, outcome.final.reasoning_tokens)
        body = response_object(self.id, self.created_at, self.host.model_id, self.body, status,
                               prefix + builder.output, usage, error=error, incomplete_details=details,
                               completed_at=int(time.time()), conversation_id=self.conversation)
        self.final = await in_store_thread(self.record, body)
        self.finished.set()
        terminal = event(TERMINAL_EVENTS[self.final["status"]], response=self.final)
        if outcome.finish.reason is not FinishReason.ERROR:
            terminal["timings"] = outcome.finish.timings.to_dict()  # as llama-server's final event carries
        yield terminal

    # -- after generation ---------------------------------------------------------

    def _failure(self, code: str, message: str) -> dict:
        return response_object(self.id, self.created_at, self.host.model_id, self.body, "failed",
                               error={"code": code, "message": message}, completed_at=int(time.time()),
                               conversation_id=self.conversation)

    def failed(self, code: str, message: str) -> dict:
        return self.record(self._failure(code, message))

    def cancelled(self) -> dict | None:
        """The cancelled object, recorded; None when the response already recorded how it
        ended (on a worker thread, just before the cancel): it stays as it ended."""
        body = response_object(self.id, self.created_at, self.host.model_id, self.body, "cancelled",
                               completed_at=int(time.time()), conversation_id=self.conversation)
        with self._recording:
            return None if self._recorded is not None else self.record(body)

    def failure_error(self) -> TurnError | StateUnavailable:
        """A failed final object as the HTTP error a whole (not streamed) request answers:
        a failed generation as the other APIs answer it (503 when the engine failed)."""
        if self.failed_generation is not None:
            return generation_error(self.failed_generation)
        error = self.final["error"]
        if error["code"] == StateUnavailable.code:
            return StateUnavailable(error["message"])
        kind = CLIENT_FAILURES.get(error["code"])
        if kind is None:
            return GenerationFailed(error["message"])
        return kind(error["message"], error["code"])

    def record(self, body: dict) -> dict:
        """Store the finished object (the store, or for a background store: false
        request the ephemeral store); continue the conversation and remember the
        reasoning of a finished generation. Returns the object polling will see: a
        failed one when the output cannot be encoded, the conversation refuses it or
        the state store cannot be written (code state_store_unavailable: a whole
        request's 503, a stream's response.failed). The first object recorded stays: a
        cancel and the end of the generation may both record, on two threads."""
        with self._recording:
            if self._recorded is None:
                try:
                    self._recorded = self._record(body)
                except StateUnavailable as exc:
                    log.warning("response %s could not be stored: %s", self.id, exc)
                    self._recorded = json_safe(self._failure(StateUnavailable.code,
                                                             f"the response could not be stored: {exc}"))
            return self._recorded

    def _record(self, body: dict) -> dict:
        if not is_json_safe(body):
            body = json_safe(self._failure("server_error", UNENCODABLE))
        output = body["output"]
        if body["status"] in ("completed", "incomplete"):
            self.state.records.reasoning_echo.remember(output)
            if self.conversation is not None:
                try:
                    # a compacted history replaces the transcript; otherwise this turn is appended to it
                    base = None if self.compaction is not None else self.conversation_base
                    self.state.records.save_conversation(self.conversation, self.history + output, self.owner, base)
                except TurnError as exc:  # the transcript stays as it was
                    message = f"the output was generated but is not kept: {exc.message}"
                    body, output = json_safe(self._failure(str(exc.code), message)), []
        records = self.state.records
        if not records.storing or not (self.body.store or self.background):
            return body
        saved = records.save(ResponseRecord(body, self.history + output, self.owner), ephemeral=not self.body.store)
        if saved or not self.background:
            return body
        # a background result larger than the store's budget: leave a failed object to poll
        fallback = {**body, "status": "failed", "output": [], "usage": usage_body(), "incomplete_details": None,
                    "error": {"code": "server_error",
                              "message": "the response is larger than the response store's byte budget"}}
        self.keep_bare(fallback)
        return fallback

    def keep_bare(self, body: dict) -> None:
        """Store a failed object without history, so that polling finds it; never raises."""
        try:
            self.state.records.save(ResponseRecord(body, [], self.owner), ephemeral=not self.body.store)
        except Exception:  # noqa: BLE001 - the caller is already handling a failure
            log.exception("response %s: its failed object could not be stored", self.id)


def progress_event(event: EventSequence, snapshot: dict, progress, timings: LiveTimings | None) -> dict:
    """llama-server's prefill progress on Responses: a response.in_progress event that
    carries `prompt_progress` (and `timings` with timings_per_token)."""
    out = event("response.in_progress", response=snapshot)
    if timings is not None:
        out["timings"] = timings.to_dict()
    out["prompt_progress"] = {"total": progress.total, "cache": progress.cache, "processed": progress.processed,
                              "time_ms": progress.time_ms}
    return out


def _status(finish: FinishEvent) -> tuple[str, dict | None, dict | None]:
    if finish.reason is FinishReason.ERROR:
        # the message the other APIs answer this failure with ("the server is shutting down",
        # the memory governor's reason, ...); a request whose own constraints left nothing to
        # sample is the client's, as the whole request's 400 says
        code = "invalid_prompt" if finish.failure is Failure.UNSATISFIABLE else "server_error"
        return "failed", None, {"code": code, "message": generation_error(finish).message}
    if finish.reason is FinishReason.CANCELLED:
        return "cancelled", None, None
    if finish.reason is FinishReason.LENGTH:
        return "incomplete", {"reason": "max_output_tokens"}, None
    return "completed", None, None
