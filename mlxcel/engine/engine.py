"""The engine thread: owns the llama context and runs the step loop.

step() = admit waiting requests into idle slots, build one batch holding the next
token of every decoding slot plus a chunk of pending prompt, decode it, then sample
and emit a token for every slot whose logits came out.

What other threads call (submit, cancel, slot actions, LoRA scales, stop) is
EngineControl's (engine_control.py): it reaches this thread as inbox commands.
"""

from __future__ import annotations

import logging
import queue
import time

from mlxcel.engine import held_wakeups
from mlxcel.engine.batch import TokenBatch
from mlxcel.engine.burst_watch import BurstWatch
from mlxcel.engine.constraints import ConstraintMasker
from mlxcel.engine.draft_choice import DraftChooser
from mlxcel.engine.draft_tracker import DRAFT_MODEL_PRIORS, SlotAcceptance
from mlxcel.engine.engine_config import EngineConfig
from mlxcel.engine.engine_control import Cancel, EndReasoning, EngineControl, EngineStoppedError, Stop, Submit
from mlxcel.engine.faults import (
    INJECTED_COMPUTE_FAILURE,
    INJECTED_NO_ROOM,
    REQUEST_LEVEL_CODES,
    Fault,
    InjectedFault,
    injection_enabled,
)
from mlxcel.engine.idle_work import IdleWork
from mlxcel.engine.llama_runtime import LlamaRuntime, logits_row
from mlxcel.engine.logprobs import token_logprobs
from mlxcel.engine.lookup_cache import NGRAM_MAX as LOOKUP_CONTEXT
from mlxcel.engine.lookup_cache import SAVE_AFTER_S
from mlxcel.engine.loop_detection import LoopDetector
from mlxcel.engine.lora_sets import LoraChange, LoraSets
from mlxcel.engine.media_prefill import EmbeddingBatch, MediaChunk
from mlxcel.engine.p_less import apply_p_less
from mlxcel.engine.prefill_queue import PrefillQueue
from mlxcel.engine.prompt_lookup import PREDICTION_NGRAM, PromptLookup
from mlxcel.engine.request import (
    Failure,
    FinishEvent,
    FinishReason,
    GenerationRequest,
    PromptProgressEvent,
    Timings,
    TokenEvent,
)
from mlxcel.engine.slot_memory import SlotMemory
from mlxcel.engine.slots import Slot, SlotState, SlotTable
from mlxcel.engine.snapshot import PUBLISH_INTERVAL_S, EngineSnapshot, take_snapshot
from mlxcel.engine.stats import EngineStats, RequestTiming
from mlxcel.engine.step_plan import Span, StepPlanner, fill_batch, rewind
from mlxcel.engine.tokenizer import Tokenizer
from mlxcel.engine.traffic_ngrams import TrafficNgrams

log = logging.getLogger("mlxcel.engine")


IDLE_SAVE_DELAY_S = 0.05  # idle this long before slots are saved to the host cache
# Requests sent together reach an idle engine a few hundred microseconds apart (the
# event loop opens them one by one), or several milliseconds apart when this thread
# keeps the GIL for the first one's admission. Prefilled alone, the first keeps the
# others waiting a whole prefill; so after a wake from idle the engine waits while they
# keep coming: up to BURST_WAIT_S for each next one, BURST_MAX_S in all; not while the
# requests come alone (BurstWatch).
BURST_WAIT_S = 0.002
BURST_MAX_S = 0.02
PRIME_TOKENS_PER_STEP = 2048  # prompt tokens accepted into a prefilling slot's sampler a step (~2.5 ms)


class ContextFailed(Exception):
    """llama_decode failed in a way no split of the batch explains."""


class Engine(EngineControl):
    def __init__(self, runtime: LlamaRuntime, tokenizer: Tokenizer, config: EngineConfig,
                 stats: EngineStats | None = None) -> None:
        """`stats`: the counters to go on from (an engine made again after the model slept)."""
        self.runtime = runtime
        self.tokenizer = tokenizer
        self.config = config
        self.n_ctx_slot = runtime.n_ctx_seq
        # a slot whose tokens the host cache holds costs little to overwrite, a micro-batch
        # more each step to leave between busy ones (with a KV stream per slot)
        split = runtime.config.n_parallel > 1 and not runtime.kv_unified
        self.slots = SlotTable(runtime.config.n_parallel, contiguous=split and config.host_cache is not None)
        self.waiting = PrefillQueue()
        self._bursts = BurstWatch()
        self.stats = stats if stats is not None else EngineStats()
        super().__init__()
        self._batch = TokenBatch(runtime.n_batch)
        self._masker: ConstraintMasker | None = (
            config.masker(tokenizer.n_vocab, len(self.slots)) if config.masker is not None else None)
        self._pending_masks = None  # (slots, future) of this step's structured-output masks
        self._admitting: GenerationRequest | None = None  # popped from the queue, not yet in a slot
        self._memory = SlotMemory(runtime, config.host_cache, config.cache_reuse)
        # most tokens drafted per round; 0 without speculation
        if config.drafter is not None:
            draft_cap = config.draft_max
        else:
            draft_cap = config.lookup_max if config.lookup_ngram > 0 else 0
        # earlier requests' outputs, which prompt lookup drafts from too (not where the
        # server reuses no state: --no-cache-prompt)
        self.traffic = (TrafficNgrams(config.traffic_tokens, config.lookup_ngram)
                        if config.traffic_tokens > 0 and config.lookup_ngram > 0 and config.drafter is None
                        and config.cache_prompt else None)
        # llama.cpp's lookup caches, drafted from beside prompt lookup (not beside a draft model)
        self.lookup_caches = config.lookup_caches if config.lookup_ngram > 0 and config.drafter is None else None
        self._drafts = DraftChooser(config.drafter, draft_cap, config.draft_min, config.decode_costs,
                                    self._batch.capacity, self.n_ctx_slot, runtime.n_ubatch, self.traffic,
                                    self.lookup_caches)
        self._planner = StepPlanner(
            self.slots, self._batch.capacity, self._drafts, prefill_chunk=config.prefill_chunk,
            n_ctx_slot=self.n_ctx_slot, split_kv=split, n_ubatch=runtime.n_ubatch,
            sizes_drafts_together=config.decode_costs is not None,
            shift_context=self._shift_context if config.context_shift else None,
            request_failed=lambda slot, phase, exc: self._request_failed(slot.request, phase, exc))
        self._idle_work = IdleWork(self.slots, runtime, self.n_ctx_slot, tokenizer.n_vocab)
        self._lora = LoraSets(runtime)
        self._injecting = injection_enabled()  # tests only: honour GenerationRequest.fault
        self.snapshot: EngineSnapshot = take_snapshot(self.slots, 0, self.stats)  # what HTTP readers see

    # -- the engine thread ------------------------------------------------------------

    def _run(self) -> None:
        failure = None
        gate = self.config.gate
        gate.join()
        try:
            # the event loops' wake-ups go out just before each decode (LlamaRuntime.decode)
            # and before this thread waits for anything; never at the end of a turn, where
            # a woken loop would take the GIL from the next turn's Python
            with held_wakeups.holding():
                self._serve(gate)
        except ContextFailed as exc:
            failure = f"the llama context failed: {exc}"
        except Exception as exc:  # the thread itself broke: nothing it holds can be trusted
            log.exception("engine thread crashed")
            failure = f"the engine thread crashed: {type(exc).__name__}: {exc}"
        finally:
            gate.leave()
            self._shut_down(failure)

    def _serve(self, gate) -> None:
        while True:
            if self._idle_work.pending:  # slot files: each once its slot is idle
                with gate.hold():
                    if self._idle_work.run_ready():
                        self._publish()
            idle = not self._has_work()
            if idle:
                held_wakeups.release()  # the last turn's events: nothing decodes next
                if self.lookup_caches is not None and self.lookup_caches.save_due(time.monotonic()):
                    self.lookup_caches.save()
            if idle or time.monotonic() - self.snapshot.taken_at >= PUBLISH_INTERVAL_S:
                self._publish()
            if idle and self._memory.has_unsaved(self.slots):
                # a save holds the engine for milliseconds: only once no request came for a while
                if not self._drain_inbox(block=True, timeout=IDLE_SAVE_DELAY_S):
                    return
                if not self._has_work():
                    with gate.hold():
                        self._memory.save_one_idle(self.slots)
                    continue
            elif not self._drain_inbox(block=idle, timeout=self._idle_wait() if idle else None):
                return
            if idle and self.waiting and not self._gather_burst():
                return
            if not self._has_work():
                continue
            if gate.active:
                held_wakeups.release()  # the wait for another engine's turn holds no events back
            # one turn of the process's engines: admission (which may restore a saved
            # state), the drafter's and the batch's decodes, and sampling from the logits
            steps = self.stats.steps
            if gate.active:
                with gate.hold():
                    self._turn()
            else:
                self._turn()
            if self.stats.steps == steps:
                held_wakeups.release()  # a turn that decoded nothing (its events must not wait for one)

    def _shut_down(self, failure: str | None) -> None:
        """Stop taking requests and finish every one still held: with the failure
        (which the server answers 503) or as shut down."""
        self._close_admission(failure)
        if failure is not None:
            log.error("engine failed, no request will be served: %s", failure)
        try:
            if self._masker is not None:
                self._masker.close()
        except Exception:  # noqa: BLE001 - shutting down regardless
            log.exception("closing the structured-output masker failed")
        while True:
            try:
                command = self._inbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(command, Submit):
                self.waiting.push(command.request)
            elif not isinstance(command, (LoraChange, EndReasoning)):
                self._idle_work.take(command)
            elif not command.done.set_running_or_notify_cancel():  # its caller went away
                continue
            elif isinstance(command, LoraChange):
                command.done.set_exception(EngineStoppedError(failure or "the server is shutting down"))
            else:
                command.done.set_result(False)
        self._idle_work.fail_all(failure or "the server is shutting down")
        self._fail_everything(failure or "the server is shutting down",
                              Failure.ENGINE if failure is not None else Failure.STOPPING)
        self._publish()
        if self.lookup_caches is not None:
            self.lookup_caches.save()  # what this engine's requests added (logged, never raised)
        if failure is not None and self.config.on_failure is not None:
            self.config.on_failure(failure)

    def _idle_wait(self) -> float | None:
        """How long an idle engine waits for a command: until the dynamic lookup cache
        is due to be written, if it changed; else for as long as none comes."""
        caches = self.lookup_caches
        if caches is None or caches.changed_at is None:
            return None
        return max(0.0, caches.changed_at + SAVE_AFTER_S - time.monotonic())

    def _publish(self) -> None:
        self.snapshot = take_snapshot(self.slots, self._outstanding, self.stats, self.waiting, bool(self._drafts.cap))

    def _has_work(self) -> bool:
        return self.slots.any_busy() or bool(self.waiting)

    def _turn(self) -> None:
        if self.waiting:
            self._admit()
        if self.slots.any_busy():
            self._step()

    def _gather_burst(self) -> bool:
        """Take the rest of a burst of requests before the first turn after idle (see
        BURST_WAIT_S): the wait ends once none comes within BURST_WAIT_S, or once as many
        wait as there are slots (no later one could join the first batch). No wait while
        the requests come alone (BurstWatch). False when asked to stop."""
        if not self._bursts.waits:
            self._bursts.woke(time.monotonic(), waited=False, queued=len(self.waiting))
            return True
        deadline = time.monotonic() + BURST_MAX_S
        while len(self.waiting) < len(self.slots) and (remaining := deadline - time.monotonic()) > 0:
            before = len(self.waiting)
            if not self._drain_inbox(block=True, timeout=min(BURST_WAIT_S, remaining)):
                return False
            if len(self.waiting) <= before:
                break
        self._bursts.woke(time.monotonic(), waited=True, queued=len(self.waiting))
        return True

    def _drain_inbox(self, block: bool, timeout: float | None = None) -> bool:
        """Apply pending commands (waiting up to `timeout` for one when blocking);
        False when asked to stop."""
        if not block and self._inbox.empty():
            return True
        try:
            command = self._inbox.get(timeout=timeout) if block else self._inbox.get_nowait()
        except queue.Empty:
            return True
        queued = False
        while True:
            if isinstance(command, Stop):
                return False
            if isinstance(command, Submit):
                if self.slots.any_busy():
                    self._bursts.arrived_busy(time.monotonic(), BURST_MAX_S)
                self.waiting.push(command.request)
                queued = True
            elif isinstance(command, Cancel):
                self._cancel(command.request_id, command.reason, command.error, command.failure)
            elif isinstance(command, (LoraChange, EndReasoning)) and not command.done.set_running_or_notify_cancel():
                pass  # its caller went away (a shutdown cancels what still waits): nothing to answer
            elif isinstance(command, LoraChange):
                self._lora.change(command)
            elif isinstance(command, EndReasoning):
                command.done.set_result(self._end_reasoning(command.request_id))
            else:
                self._idle_work.take(command)
            try:
                command = self._inbox.get_nowait()
            except queue.Empty:
                if queued:
                    self._publish()  # the queue grew
                return True

    def _cancel(self, request_id: int, reason: FinishReason = FinishReason.CANCELLED, error: str | None = None,
                failure: Failure | None = None) -> None:
        request = self.waiting.remove(request_id)
        if request is not None:
            self._finish_unstarted(request, reason, error=error, failure=failure)
            return
        for slot in self.slots:
            if slot.request is not None and slot.request.id == request_id:
                if failure is Failure.SHED:
                    self._forget_sequence(slot)  # the point is to free what it holds
                self._finish(slot, reason, error=error, failure=failure)
                return

    def _end_reasoning(self, request_id: int) -> bool:
        for slot in self.slots:
            if slot.request is not None and slot.request.id == request_id:
                budget = slot.budget
                if budget is None or not budget.open or budget.done or slot.forced_tokens:
                    return False
                budget.done = True
                slot.forced_tokens = list(slot.request.reasoning_close_tokens)
                return True
        return False

    # -- one request's failure ----------------------------------------------------------

    def _request_failed(self, request: GenerationRequest, phase: str, exc: BaseException) -> None:
        """`request` broke while `phase`: it alone fails; the engine goes on."""
        log.error("request %d failed while %s", request.id, phase, exc_info=exc)
        message = f"internal error while {phase} (engine request {request.id}): {type(exc).__name__}"
        for slot in self.slots:
            if slot.request is request:
                self._fail_slot(slot, message)
                return
        self.waiting.remove(request.id)
        self._finish_unstarted(request, FinishReason.ERROR, error=message)

    def _fail_slot(self, slot: Slot, message: str) -> None:
        self._forget_sequence(slot)
        self._finish(slot, FinishReason.ERROR, error=message)

    def _forget_sequence(self, slot: Slot) -> None:
        """Drop what the slot's sequence holds: after a failure it cannot be trusted."""
        self.runtime.seq_clear(slot.id)
        slot.cached_tokens.clear()

    # -- admission ----------------------------------------------------------------------

    def _admit(self) -> None:
        while self.waiting and (idle := self.slots.idle()):
            request = self.waiting.pop_for({slot.id for slot in idle})
            if request is None:  # every waiting request is pinned to a busy slot
                return
            self._admitting = request  # in neither the queue nor a slot for a moment
            if self._injecting and request.fault is Fault.CRASH:
                raise InjectedFault("engine thread crash")
            try:
                self._admit_one(request)
            except Exception as exc:  # noqa: BLE001 - one request's failure is its own
                self._request_failed(request, "admitting", exc)
            self._admitting = None

    def _admit_one(self, request: GenerationRequest) -> None:
        admitting = time.monotonic()
        reuse = self.config.cache_prompt and request.cache_prompt
        lora = self._lora.of(request.lora)
        slot, n_common = self.slots.choose(request.prompt_tokens, reuse, request.id_slot, lora)
        try:
            if self._injecting and request.fault is Fault.ADMIT:
                raise InjectedFault("admission")
            if not request.prompt_tokens:  # nothing to take logits from: it would sample another slot's row
                raise ValueError("the prompt is empty")
            if request.media and request.media.widest_non_causal() > self.runtime.n_ubatch:
                raise ValueError(f"a media chunk of {request.media.widest_non_causal()} positions must be decoded in "
                                 f"one micro-batch, larger than --ubatch-size {self.runtime.n_ubatch}")
            if request.constraint is not None and self._masker is None:
                raise ValueError("this engine has no structured-output masker")
            busy = [s for s in self.slots if s.request is not None] if reuse else []
            self._memory.clear_idle(slot, self.slots)  # a unified pool: before a restore needs the room
            chunk_reuse = self.config.cache_reuse if request.cache_reuse is None else request.cache_reuse
            self._memory.admit(slot, request.prompt_tokens, n_common if reuse else 0, reuse, busy, lora,
                               chunks=not request.media and self.runtime.can_shift, chunk_reuse=chunk_reuse)
            if request.media:  # never keep part of a non-causal media span
                self._memory.cut(slot, request.media.safe_prefix(slot.n_past))
            sampler = self.config.sampler(
                request.sampling,
                self.runtime.vocab,
                self.tokenizer.n_vocab,
                self.n_ctx_slot,
                self.tokenizer.eog_tokens if request.ignore_eos else frozenset(),
            )
            sampler.prime(request.prompt_tokens)
        except BaseException:
            self._forget_sequence(slot)  # admission may have left it half-restored
            raise
        loop = LoopDetector(*request.loop_detection) if request.loop_detection else None
        slot.begin(request, slot.n_past, sampler, loop)
        slot.wait_s = admitting - request.created
        slot.restore_s = slot.admitted_at - admitting
        self.stats.prompt_tokens_cached += slot.n_reused
        if request.report_progress:
            self._report_progress(slot)
        ngram = self.config.lookup_ngram  # prompt lookup, or a prediction beside the draft model
        if not ngram and self.config.drafter is not None and request.prediction:
            ngram = PREDICTION_NGRAM
        if ngram > 0:
            slot.lookup = PromptLookup(ngram, self._drafts.cap, self.config.draft_min, request.prediction,
                                       len(request.prompt_tokens))
        if self._drafts.cap:
            # a draft model has one kind of draft (class 0; a prediction's classes beside it);
            # prompt lookup's differ by how long a match they copy
            slot.acceptance = SlotAcceptance(self._drafts.cap,
                                             DRAFT_MODEL_PRIORS if self.config.drafter is not None else None)
        self.stats.sequences_started += 1
        self._publish()

    # -- one step -----------------------------------------------------------------------

    def _step(self) -> None:
        started = time.perf_counter()
        self._planner.lora = self._lora.step_set(self.slots)
        media = self._planner.media()
        if media is not None:
            self._decode_media(media)
        spans = self._planner.plan(media.n if media is not None else 0)
        self.stats.step_schedule_seconds += time.perf_counter() - started
        if not spans:
            return
        self.stats.steps += 1
        constrained = [sp.slot for sp in spans if sp.samples and sp.slot.request.constraint is not None]
        if constrained:
            future = self._masker.fill_async([slot.request.constraint for slot in constrained])
            self._pending_masks = (constrained, future)
        try:
            self._decode_spans(spans, whole=True)
        finally:
            self._collect_masks()
        self._prime_prefilling()

    def _prime_prefilling(self) -> None:
        """A step's share of each prefilling slot's prompt into its sampler chain's
        history, so a long window's accepts do not stall the other slots at once."""
        for slot in self.slots:
            if slot.state is SlotState.PREFILL and slot.sampler is not None and slot.sampler.priming:
                slot.sampler.prime_some(PRIME_TOKENS_PER_STEP)

    def _decode_media(self, chunk: MediaChunk) -> None:
        """Decode a media chunk in a batch of its own; when it ends the prompt, sample
        its slot now, before the next decode replaces the logits."""
        slot, request = chunk.slot, chunk.slot.request
        started = time.perf_counter()
        batch = EmbeddingBatch(chunk.span.embeddings[chunk.offset : chunk.offset + chunk.n], chunk.start, slot.id,
                               logits_last=chunk.last)
        self._lora.use(slot.lora)
        rc = self.runtime.decode(batch.struct, causal=not chunk.span.non_causal)
        elapsed = time.perf_counter() - started
        self.stats.step_decode_seconds += elapsed
        if rc != 0:
            self.runtime.seq_remove(slot.id, slot.n_past, -1)
            if rc not in REQUEST_LEVEL_CODES:
                raise ContextFailed(f"llama_decode returned {rc} for {chunk.n} media positions")
            self._fail_slot(slot, f"llama_decode failed ({rc}) for this request's media (engine request {request.id})")
            return
        slot.cached_tokens.extend(request.prompt_tokens[chunk.start : chunk.start + chunk.n])
        self.stats.prefill_chunks += 1
        self.stats.prefill_tokens += chunk.n  # prompt tokens processed (llama-server counts media ones too)
        self.stats.prompt_seconds += elapsed
        if request.report_progress:
            self._report_progress(slot)
        if chunk.last:
            if request.constraint is not None:
                slot.mask_row = self._masker.fill_async([request.constraint]).result()[0]
            slot.batch_index = chunk.n - 1
            self._sample_spans([Span(slot, [], chunk.start, prefill=True)])

    def _shift_context(self, slot: Slot) -> bool:
        """Make room in a slot whose next token would take its context's last cell, as
        llama-server does: keep the request's n_keep prompt tokens (BOS not counted),
        drop half of the rest (or n_discard) and move what follows down. False when
        the request ended instead."""
        request = slot.request
        try:
            n_keep = len(request.prompt_tokens) if request.n_keep < 0 else request.n_keep
            n_keep = min(self.n_ctx_slot - 4, n_keep + (1 if self.tokenizer.add_bos else 0))
            n_left = slot.n_past - n_keep
            n_discard = max(0, min(request.n_discard or n_left // 2, n_left - 1))
            if n_discard == 0 or not self.runtime.shift_seq(slot.id, n_keep, n_discard):
                raise RuntimeError(f"cannot shift the context (n_keep {n_keep}, n_left {n_left})")
        except Exception as exc:  # noqa: BLE001 - one request's failure is its own
            self._request_failed(request, "shifting the context", exc)
            return False
        del slot.cached_tokens[n_keep : n_keep + n_discard]
        slot.shifted_keep = n_keep
        self.stats.context_shifts += 1
        log.info("request %d: context shift in slot %d, n_keep = %d, n_discard = %d", request.id, slot.id,
                 n_keep, n_discard)
        return True

    def _decode_spans(self, spans: list[Span], whole: bool) -> None:
        """Decode the spans and sample their slots. A batch llama_decode refuses is
        split in halves and retried; a lone sequence it still refuses fails alone,
        unless the failure says the context itself is broken."""
        filling = time.perf_counter()
        batch = self._batch
        self.stats.prefill_chunks += fill_batch(batch, spans)
        # the step's bookkeeping before the decode: right after it, every line of Python
        # here would run on caches the decode has just flushed
        n_prefill = n_decode = 0
        for span in spans:
            if span.prefill:
                n_prefill += len(span.tokens)
            else:
                n_decode += 1
        n_busy, longest = self.slots.occupancy()
        costs = self.config.decode_costs if whole and n_prefill == 0 else None
        ubatches = self._planner.ubatches(spans) if costs is not None else None
        started = time.perf_counter()
        self.stats.step_fill_seconds += started - filling
        rc = self._decode(batch, spans)
        decoded = time.perf_counter() - started
        self.stats.step_decode_seconds += decoded
        if rc == 0:
            if costs is not None:
                costs.observe(ubatches, decoded)
            if n_decode:
                self.stats.decode_steps += 1
            self._collect_masks()
            for span in spans:
                if span.prefill and span.slot.request is not None and span.slot.request.report_progress:
                    self._report_progress(span.slot)
            self._sample_spans(spans)  # reading the logits waits for the decode
            self.stats.count_decode(n_busy, longest, n_prefill, time.perf_counter() - started)
            return
        rewind(spans, self.runtime.seq_remove)
        log.warning("llama_decode returned %d for a batch of %d tokens in %d sequences", rc, batch.size, len(spans))
        if len(spans) > 1:
            middle = len(spans) // 2
            self._decode_spans(spans[:middle], whole=False)
            self._decode_spans(spans[middle:], whole=False)
            return
        slot = spans[0].slot
        if rc not in REQUEST_LEVEL_CODES:
            raise ContextFailed(f"llama_decode returned {rc} for a lone sequence of {batch.size} tokens")
        message = (f"llama_decode failed ({rc}) for this request's {batch.size} tokens "
                   f"(engine request {slot.request.id})")
        log.error("%s", message)
        self._fail_slot(slot, message)

    def _decode(self, batch: TokenBatch, spans: list[Span]) -> int:
        if self._injecting:
            faults = {span.slot.request.fault for span in spans}
            if Fault.CONTEXT in faults:
                return INJECTED_COMPUTE_FAILURE
            if Fault.DECODE in faults or (Fault.SPLIT in faults and len(spans) > 1):
                return INJECTED_NO_ROOM
        self._lora.use(spans[0].slot.lora)  # every span's: a step takes one set's slots
        return self.runtime.decode(batch.seal())  # masks fill meanwhile: both release the GIL

    @staticmethod
    def _report_progress(slot: Slot) -> None:
        request = slot.request
        elapsed_ms = int((time.monotonic() - slot.admitted_at) * 1e3)
        request.emit(PromptProgressEvent(total=len(request.prompt_tokens), cache=slot.n_reused,
                                         processed=slot.n_past, time_ms=elapsed_ms))

    def _collect_masks(self) -> None:
        if self._pending_masks is None:
            return
        slots, future = self._pending_masks
        self._pending_masks = None
        for slot, row in zip(slots, future.result()):
            slot.mask_row = row

    def _sample_spans(self, spans: list[Span]) -> None:
        started = time.perf_counter()
        emitting = self.stats.step_emit_seconds
        try:
            self._sample_each(spans)
        finally:  # emitting is counted on its own
            emitted = self.stats.step_emit_seconds - emitting
            self.stats.step_sample_seconds += time.perf_counter() - started - emitted

    def _sample_each(self, spans: list[Span]) -> None:
        for span in spans:
            slot = span.slot
            request = slot.request
            if request is None:
                continue
            try:
                if slot.drafts:
                    self._verify(slot)
                elif slot.batch_index >= 0:
                    self._sample(slot)
            except Exception as exc:  # noqa: BLE001 - one request's failure is its own
                self._request_failed(request, "sampling", exc)

    def _verify(self, slot: Slot) -> None:
        """Sample at the slot's token and at each drafted one in order, keeping drafts
        while they equal what was sampled; the rest of the drafted memory is cut (a
        plain-greedy sampler reads each row's argmax: SamplerChain.sample)."""
        drafts, indices = slot.drafts, slot.draft_indices
        slot.drafts, slot.draft_indices = [], []
        rows = [slot.batch_index, *indices]
        # counted as they happen: a token sampled here may end the request, whose
        # timings then hold this round (every draft rejected until one is accepted)
        predicted, traffic, cached = slot.drafts_predicted, slot.drafts_traffic, slot.drafts_lookup_cache
        slot.draft_rounds += 1
        slot.draft_n += len(drafts)
        if not slot.accepted_at:
            slot.accepted_at = [0] * max(self._drafts.cap, len(drafts))
        if predicted:
            slot.prediction_rejected += len(drafts)
        if traffic:
            self.stats.traffic_draft_tokens += len(drafts)
        if cached:
            self.stats.lookup_cache_draft_tokens += len(drafts)
        for i, row in enumerate(rows):
            slot.batch_index = row
            sampled = self._sample(slot)
            if slot.request is None or slot.state is not SlotState.DECODE:
                break  # finished
            if i < len(drafts) and sampled == drafts[i]:
                slot.cached_tokens.append(sampled)  # its memory was written by this batch
                slot.draft_accepted += 1
                if i < len(slot.accepted_at):
                    slot.accepted_at[i] += 1
                if predicted:
                    slot.prediction_accepted += 1
                    slot.prediction_rejected -= 1
                if traffic:
                    self.stats.traffic_draft_accepted += 1
                if cached:
                    self.stats.lookup_cache_draft_accepted += 1
                continue
            break
        self.runtime.seq_remove(slot.id, len(slot.cached_tokens), -1)

    def _sample(self, slot: Slot) -> int:
        request = slot.request
        index, slot.batch_index = slot.batch_index, -1
        if self._injecting and request.fault is Fault.SAMPLE:
            raise InjectedFault("sampling")
        constraint = request.constraint
        if constraint is not None and constraint.error:
            # the step's mask could not be computed: the request's own grammar ran past the
            # matcher's limits (a regex whose lexer grows with each token), a 400 like an
            # oversized schema, found only as the output reached it
            self._finish(slot, FinishReason.ERROR, failure=Failure.UNSATISFIABLE,
                         error=f"the output format's grammar exceeded the structured-output limits: {constraint.error}")
            return -1
        k = request.logprobs
        post = k is not None and request.post_sampling_probs
        if k is not None or request.sampling.p_less or constraint is not None:
            logits = logits_row(self.runtime.ctx, index, self.tokenizer.n_vocab)
            if k is not None and not post:
                raw = logits.copy()
            if constraint is not None:
                self._masker.apply(logits, slot.mask_row)
            if request.sampling.p_less and not request.sampling.greedy:
                apply_p_less(logits, request.sampling.temperature)
        scores: dict = {}
        if slot.forced_tokens:
            token = slot.forced_tokens.pop(0)
            slot.sampler.accept(token)
        elif post:  # the chain runs on a candidates array it leaves readable
            token, prob, top_probs = slot.sampler.sample_with_probs(logits, k)
            scores = {"prob": prob, "top_probs": top_probs}
        else:
            token = slot.sampler.sample(self.runtime.ctx, index)
        if k is not None and not post:
            logprob, top = token_logprobs(raw, token, k)
            scores = {"logprob": logprob, "top_logprobs": top}
        if constraint is not None and not constraint.accept(token):
            if slot.mask_row is not None and self._masker.allows(slot.mask_row, token):
                # a token the format allows broke the matcher as it went in: the request's own
                # grammar ran past its limits (a rule repeated 100000 times, thousands of
                # alternatives), a 400 like an oversized schema
                error = f"the output format's grammar exceeded the structured-output limits: {constraint.error}"
            else:
                # the mask leaves the sampler no token only when the request itself banned
                # every token the format allows
                error = f"no token satisfies both the output format and the request's {self._bans_named(slot)}"
            self._finish(slot, FinishReason.ERROR, failure=Failure.UNSATISFIABLE, error=error)
            return token
        self._accept_token(slot, token, scores)
        return token

    def _bans_named(self, slot: Slot) -> str:
        """The request's fields that banned every token its format allowed: its logit_bias,
        and ignore_eos where the format allowed an end of generation."""
        request = slot.request
        ends_allowed = slot.mask_row is not None and any(
            self._masker.allows(slot.mask_row, token) for token in self.tokenizer.eog_tokens)
        if request.ignore_eos and ends_allowed:
            return "logit_bias and ignore_eos" if request.sampling.logit_bias else "ignore_eos"
        return "logit_bias"

    def _accept_token(self, slot: Slot, token: int, scores: dict | None = None) -> None:
        """`scores`: the TokenEvent's probability fields, when the request asked for them."""
        request = slot.request
        scores = scores or {}
        now = time.monotonic()
        if slot.n_generated == 0:
            slot.first_token_at = now
            self.stats.count_first_token(slot.wait_s, slot.restore_s, now - slot.admitted_at,
                                         len(request.prompt_tokens) - slot.n_reused)
        else:  # a token of a decode step (a verified draft's too); the first came from the prompt
            self.stats.decode_tokens += 1
        slot.n_generated += 1
        if slot.acceptance is not None:
            slot.acceptance.emitted(token)
        if self.tokenizer.is_eog(token) and not request.ignore_eos:
            end = TokenEvent(token=token, text="", **scores) if scores else None
            if self.tokenizer.render_special:  # -sp: the end token's text ends the output, as in llama-server
                text = slot.stop_matcher.feed(slot.text_decoder.feed(self.tokenizer.piece(token)))[0]
                if text:
                    request.emit(TokenEvent(token=token, text=text, **scores))
                    end = None
            self._finish(slot, FinishReason.STOP, eos=True, end_token=end)
            return
        text = slot.text_decoder.feed(self.tokenizer.piece(token))
        if slot.budget is not None and slot.budget.observe(text):
            slot.budget.done = True
            slot.forced_tokens = list(request.reasoning_close_tokens)
        text, stop_word = slot.stop_matcher.feed(text)
        line_stop = False
        if slot.line_limits is not None and stop_word is None:
            text, line_stop = slot.line_limits.feed(text, 1e3 * (now - slot.first_token_at))
        emitting = time.perf_counter()
        request.emit(TokenEvent(token=token, text=text, **scores))
        self.stats.step_emit_seconds += time.perf_counter() - emitting
        if stop_word is not None:
            self._finish(slot, FinishReason.STOP, stop_word=stop_word)
        elif line_stop:
            self._finish(slot, FinishReason.LENGTH, drop_held=True)
        elif request.constraint is not None and request.constraint.is_finished():
            self._finish(slot, FinishReason.STOP, eos=True)  # only EOG could follow (llama-server: an eos stop)
        elif slot.loop_detector is not None and slot.loop_detector.observe(token):
            self._finish(slot, FinishReason.STOP)
        elif 0 <= request.max_tokens <= slot.n_generated:
            self._finish(slot, FinishReason.LENGTH)
        elif slot.n_past + 1 >= self.n_ctx_slot and not (self.config.context_shift and not request.media):
            self._finish(slot, FinishReason.LENGTH, truncated=True)  # llama-server's stop at the context's end
        else:
            slot.next_token = token
            slot.state = SlotState.DECODE

    def _finish(
        self,
        slot: Slot,
        reason: FinishReason,
        *,
        stop_word: str | None = None,
        eos: bool = False,
        error: str | None = None,
        failure: Failure | None = None,
        truncated: bool = False,
        end_token: TokenEvent | None = None,
        drop_held: bool = False,
    ) -> None:
        """End the slot's request: release the slot and emit its FinishEvent. Nothing
        here may keep the event from being emitted. `drop_held`: text still held back
        (a partial stop string or character) lies past where the output was cut."""
        request = slot.request
        now = time.monotonic()
        tail = ""
        if stop_word is None and slot.text_decoder is not None and error is None and not drop_held:
            try:
                tail = slot.stop_matcher.feed(slot.text_decoder.flush())[0] + slot.stop_matcher.flush()
            except Exception:  # noqa: BLE001 - the held-back text is lost, the answer still ends
                log.exception("request %d: releasing held-back text failed", request.id)
        first = slot.first_token_at or now
        prompt_n = len(request.prompt_tokens) - slot.n_reused
        if slot.n_generated and error is None and request.cache_prompt:
            self._hold_output(slot)  # an opted-out request donates nothing, as to the prompt cache
        timings = Timings(
            cache_n=slot.n_reused,
            prompt_n=prompt_n,
            prompt_ms=(first - slot.admitted_at) * 1e3,
            wait_ms=slot.wait_s * 1e3,
            restore_ms=slot.restore_s * 1e3,
            predicted_n=slot.n_generated,
            predicted_ms=(now - first) * 1e3,
            draft_n=slot.draft_n,
            draft_n_accepted=slot.draft_accepted,
            draft_rounds=slot.draft_rounds,
            draft_kind=(("draft-model" if self.config.drafter else "prompt-lookup") if slot.draft_rounds else None),
            cache_tier=slot.cache_tier,
            prediction_accepted=slot.prediction_accepted,
            prediction_rejected=slot.prediction_rejected,
        )
        seed = slot.sampler.seed if slot.sampler is not None else None
        truncated = truncated or slot.shifted_keep is not None
        if slot.shifted_keep is not None:
            self._keep_unshifted_prefix(slot)
        if not (self.config.cache_prompt and request.cache_prompt):
            # an opted-out request donates nothing: forget what its sequence holds
            self._forget_sequence(slot)
        self.stats.count_prediction(slot.n_generated, now - first, slot.draft_n, slot.draft_accepted, slot.draft_rounds,
                                    slot.accepted_at)
        if slot.n_generated:
            self.stats.record_request(RequestTiming(len(request.prompt_tokens), prompt_n, first - slot.admitted_at,
                                                    slot.n_generated, now - first))
        slot.release()
        self._record(request, reason, slot.n_generated, now)
        self._publish()  # readers see the slot free before its client hears the end
        request.emit(
            FinishEvent(
                reason=reason,
                prompt_tokens=len(request.prompt_tokens),
                completion_tokens=timings.predicted_n,
                cached_tokens=slot.n_reused,
                timings=timings,
                text=tail,
                stop_word=stop_word,
                stopped_by_eos=eos,
                seed=seed,
                slot_id=slot.id,
                error=error,
                failure=failure,
                truncated=truncated,
                end_token=end_token,
            )
        )

    def _hold_output(self, slot: Slot) -> None:
        """Add the slot's output, with the n tokens before it, to the traffic drafts and
        the dynamic lookup cache (its memory's: all but the last token emitted, which
        was never decoded). Drafts are verified: another request's output decides only
        what is drafted, not what is accepted."""
        output = slot.n_generated - 1
        try:
            if self.traffic is not None:
                self.traffic.add(slot.cached_tokens[-(output + self.traffic.ngram):])
            if self.lookup_caches is not None and output > 0:
                self.lookup_caches.add(slot.cached_tokens[-(output + LOOKUP_CONTEXT):], output)
        except Exception:  # noqa: BLE001 - a lost entry costs a draft, never the answer
            log.exception("request %d: holding its output for drafts failed", slot.request.id)

    def _keep_unshifted_prefix(self, slot: Slot) -> None:
        """A shifted sequence's memory past its kept prefix was computed over tokens it
        no longer holds: only that prefix may be reused as a later prompt's."""
        keep, slot.shifted_keep = slot.shifted_keep, None
        if not self.runtime.seq_remove(slot.id, keep, -1):
            self._forget_sequence(slot)
            return
        del slot.cached_tokens[keep:]

    def _finish_unstarted(
        self, request: GenerationRequest, reason: FinishReason, error: str | None = None,
        failure: Failure | None = None,
    ) -> None:
        self._finished_one()
        self._publish()
        request.emit(
            FinishEvent(
                reason=reason,
                prompt_tokens=len(request.prompt_tokens),
                completion_tokens=0,
                cached_tokens=0,
                timings=Timings(),
                error=error,
                failure=failure,
            )
        )

    def _record(self, request: GenerationRequest, reason: FinishReason, n_generated: int, now: float) -> None:
        self._finished_one()
        self.stats.sequences_completed += 1
        if reason in (FinishReason.STOP, FinishReason.LENGTH):
            self.stats.requests_completed += 1
            self.stats.prompt_tokens += len(request.prompt_tokens)
            self.stats.completion_tokens += n_generated
            self.stats.generation_seconds += now - request.created

    def _fail_everything(self, message: str, failure: Failure) -> None:
        for slot in self.slots:
            if slot.request is not None:
                try:
                    self._finish(slot, FinishReason.ERROR, error=message, failure=failure)
                except Exception:  # noqa: BLE001 - the others must still be told
                    log.exception("finishing request %d failed", slot.request.id)
        limbo = self._admitting
        if limbo is not None and not any(slot.request is limbo for slot in self.slots):
            self.waiting.push(limbo)  # the thread died admitting it
        self._admitting = None
        for request in self.waiting.drain():
            self._finish_unstarted(request, FinishReason.ERROR, error=message, failure=failure)
