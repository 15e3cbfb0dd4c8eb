"""The engine thread: owns the llama context and runs the step loop.

step() = admit waiting requests into idle slots, build one batch holding the next
token of every decoding slot plus a chunk of pending prompt, decode it, then sample
and emit a token for every slot whose logits came out.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass

from mlxcel.engine.batch import TokenBatch
from mlxcel.engine.draft_model import DraftModel
from mlxcel.engine.draft_policy import AcceptanceStats, DecodeCosts, best_draft_length
from mlxcel.engine.llama_runtime import LlamaRuntime, logits_row
from mlxcel.structured.constraint import BatchMasker, apply_mask
from mlxcel.engine.logprobs import token_logprobs
from mlxcel.engine.loop_detection import LoopDetector
from mlxcel.engine.p_less import apply_p_less
from mlxcel.engine.prefill_queue import PrefillQueue
from mlxcel.engine.prompt_cache import HostPromptCache
from mlxcel.engine.slot_memory import SlotMemory
from mlxcel.engine.prompt_lookup import PromptLookup
from mlxcel.engine.request import FinishEvent, FinishReason, GenerationRequest, Timings, TokenEvent
from mlxcel.engine.sampling import SamplerChain
from mlxcel.engine.slots import Slot, SlotState, SlotTable
from mlxcel.engine.stats import EngineStats
from mlxcel.engine.tokenizer import Tokenizer

log = logging.getLogger("mlxcel.engine")


IDLE_SAVE_DELAY_S = 0.05  # idle this long before slots are saved to the host cache


class QueueFullError(RuntimeError):
    """The prefill queue is at its cap."""


class EngineStoppedError(RuntimeError):
    pass


@dataclass(frozen=True)
class EngineConfig:
    queue_cap: int = 64  # requests waiting for a slot, beyond those running
    prefill_chunk: int = 256  # prompt tokens per step while other slots decode
    cache_prompt: bool = True  # reuse a slot's previous tokens as a prompt prefix
    host_cache: HostPromptCache | None = None  # KV states saved beyond the slots
    lookup_ngram: int = 0  # prompt-lookup speculation: n-gram size (0: off)
    drafter: DraftModel | None = None  # draft-model speculation (--model-draft)
    draft_max: int = 16  # most tokens a draft model drafts per verify round
    lookup_max: int = 48  # most tokens prompt lookup drafts per verify round
    draft_min: int = 2  # fewer drafted tokens than this are not worth a round
    decode_costs: DecodeCosts | None = None  # measured batch costs; speculation sizes drafts by them


@dataclass
class _Submit:
    request: GenerationRequest


@dataclass
class _Cancel:
    request_id: int


class _Stop:
    pass


class Engine:
    def __init__(self, runtime: LlamaRuntime, tokenizer: Tokenizer, config: EngineConfig) -> None:
        self.runtime = runtime
        self.tokenizer = tokenizer
        self.config = config
        self.n_ctx_slot = runtime.n_ctx_seq
        self.slots = SlotTable(runtime.config.n_parallel)
        self.waiting = PrefillQueue()
        self.stats = EngineStats()
        self._batch = TokenBatch(runtime.n_batch)
        self._masker = BatchMasker(tokenizer.n_vocab, len(self.slots))
        self._memory = SlotMemory(runtime, config.host_cache)
        # most tokens drafted per round; 0 without speculation
        if config.drafter is not None:
            self._draft_cap = config.draft_max
        else:
            self._draft_cap = config.lookup_max if config.lookup_ngram > 0 else 0
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._admission = threading.Lock()
        self._outstanding = 0  # submitted and not yet finished
        self._thread = threading.Thread(target=self._run, name="mlxcel-engine", daemon=True)
        self._stopped = False

    # -- called from other threads ----------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    @property
    def has_room(self) -> bool:
        """Whether a request submitted now would be admitted (not past the queue cap)."""
        return self._outstanding < len(self.slots) + self.config.queue_cap

    def submit(self, request: GenerationRequest) -> None:
        """Queue a request, or raise QueueFullError at once when the queue is at its cap."""
        with self._admission:
            if self._stopped:
                raise EngineStoppedError("the engine is shutting down")
            if not self.has_room:
                self.stats.rejected_queue_full += 1
                raise QueueFullError("the prefill queue is full")
            self._outstanding += 1
        self._inbox.put(_Submit(request))

    def cancel(self, request_id: int) -> None:
        self._inbox.put(_Cancel(request_id))

    def stop(self, timeout: float = 5.0) -> None:
        with self._admission:
            self._stopped = True
        self._inbox.put(_Stop())
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def queue_depth(self) -> int:
        """Requests submitted but not yet in a slot."""
        busy = sum(1 for s in self.slots if s.state is not SlotState.IDLE)
        return max(0, self._outstanding - busy)

    # -- the engine thread ------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                idle = not self._has_work()
                if idle and self._memory.has_unsaved(self.slots):
                    # a save holds the engine for milliseconds: only once no request came for a while
                    if not self._drain_inbox(block=True, timeout=IDLE_SAVE_DELAY_S):
                        break
                    if not self._has_work():
                        self._memory.save_one_idle(self.slots)
                        continue
                elif not self._drain_inbox(block=idle):
                    break
                self._admit()
                if self.slots.busy():
                    self._step()
        except Exception:  # never leave handlers waiting on a dead thread
            log.exception("engine thread crashed")
            self._fail_everything("internal engine error")
        finally:
            self._masker.close()
            while True:
                try:
                    command = self._inbox.get_nowait()
                except queue.Empty:
                    break
                if isinstance(command, _Submit):
                    self.waiting.push(command.request)
            self._fail_everything("the server is shutting down")

    def _has_work(self) -> bool:
        return bool(self.slots.busy()) or bool(self.waiting)

    def _drain_inbox(self, block: bool, timeout: float | None = None) -> bool:
        """Apply pending commands (waiting up to `timeout` for one when blocking);
        False when asked to stop."""
        try:
            command = self._inbox.get(timeout=timeout) if block else self._inbox.get_nowait()
        except queue.Empty:
            return True
        while True:
            if isinstance(command, _Stop):
                return False
            if isinstance(command, _Submit):
                self.waiting.push(command.request)
            elif isinstance(command, _Cancel):
                self._cancel(command.request_id)
            try:
                command = self._inbox.get_nowait()
            except queue.Empty:
                return True

    def _cancel(self, request_id: int) -> None:
        request = self.waiting.remove(request_id)
        if request is not None:
            self._finish_unstarted(request, FinishReason.CANCELLED)
            return
        for slot in self.slots:
            if slot.request is not None and slot.request.id == request_id:
                self._finish(slot, FinishReason.CANCELLED)
                return

    def _admit(self) -> None:
        while self.waiting and self.slots.idle():
            request = self.waiting.pop()
            reuse = self.config.cache_prompt and request.cache_prompt
            slot, n_common = self.slots.choose(request.prompt_tokens, reuse)
            busy = [s for s in self.slots if s.request is not None] if reuse else []
            self._memory.admit(slot, request.prompt_tokens, n_common if reuse else 0, reuse, busy)
            sampler = SamplerChain(
                request.sampling,
                self.runtime.vocab,
                self.tokenizer.n_vocab,
                self.n_ctx_slot,
                self.tokenizer.eog_tokens if request.ignore_eos else frozenset(),
            )
            loop = LoopDetector(*request.loop_detection) if request.loop_detection else None
            slot.begin(request, slot.n_past, sampler, loop)
            if self.config.lookup_ngram > 0:
                slot.lookup = PromptLookup(self.config.lookup_ngram, self.config.lookup_max, self.config.draft_min)
            if self._draft_cap:
                slot.acceptance = AcceptanceStats(self._draft_cap)
            self.stats.sequences_started += 1

    def _step(self) -> None:
        batch = self._batch
        batch.clear()
        in_batch: list[Slot] = []
        expected_yield = 0.0  # tokens this batch is expected to emit
        for slot in self.slots:
            if slot.state is SlotState.DECODE:
                slot.batch_index = batch.add(slot.next_token, slot.n_past, slot.id, True)
                slot.cached_tokens.append(slot.next_token)
                expected_yield += 1.0
                slot.drafts, gain = self._draft(slot, batch, expected_yield)
                expected_yield += gain
                slot.draft_indices = [
                    batch.add(token, slot.n_past + i, slot.id, True) for i, token in enumerate(slot.drafts)
                ]
                in_batch.append(slot)
        n_decode = len(in_batch)
        budget = batch.room if n_decode == 0 else min(batch.room, self.config.prefill_chunk)
        prefilling = sorted(
            (s for s in self.slots if s.state is SlotState.PREFILL), key=lambda s: s.admitted_at
        )
        n_prefill = 0
        for slot in prefilling:
            if budget <= 0:
                break
            start = slot.n_past
            take = min(budget, slot.prompt_remaining)
            chunk = slot.request.prompt_tokens[start : start + take]
            last = take == slot.prompt_remaining
            index = batch.add_span(chunk, start, slot.id, logits_last=last)
            slot.batch_index = index if last else -1
            slot.cached_tokens.extend(chunk)
            budget -= take
            n_prefill += take
            in_batch.append(slot)
            self.stats.prefill_chunks += 1

        constrained = [s for s in in_batch if s.batch_index >= 0 and s.request.constraint is not None]
        masks = self._masker.fill_async([s.request.constraint for s in constrained]) if constrained else None
        started = time.perf_counter()
        rc = self.runtime.decode(batch.seal())  # the masks fill meanwhile: both release the GIL
        if self.config.decode_costs is not None and n_prefill == 0:
            self.config.decode_costs.observe(batch.size, time.perf_counter() - started)
        if masks is not None:
            for slot, row in zip(constrained, masks.result()):
                slot.mask_row = row
        if rc != 0:
            log.error("llama_decode returned %d for a batch of %d tokens", rc, batch.size)
            for slot in in_batch:
                self.runtime.seq_clear(slot.id)
                slot.cached_tokens.clear()
                self._finish(slot, FinishReason.ERROR, error=f"llama_decode failed ({rc})")
            return
        self.stats.prefill_tokens += n_prefill
        if n_decode:
            self.stats.decode_steps += 1
            self.stats.decode_tokens += n_decode

        for slot in in_batch:
            if slot.drafts:
                self._verify(slot)
            elif slot.batch_index >= 0:
                self._sample(slot)

    def _draft(self, slot: Slot, batch: TokenBatch, expected_yield: float) -> tuple[list[int], float]:
        """The tokens to draft for a decoding slot (none when speculation cannot apply
        or would not pay for itself in this batch) and how many of them are expected
        to be accepted."""
        request = slot.request
        drafter = self.config.drafter
        if slot.acceptance is None or request.constraint is not None or slot.forced_tokens:
            return [], 0.0
        if slot.budget is not None and not slot.budget.done:
            return [], 0.0
        limit = min(batch.room - len(self.slots), self.n_ctx_slot - slot.n_past - 2, self._draft_cap)
        if request.max_tokens >= 0:
            limit = min(limit, request.max_tokens - slot.n_generated - 1)
        if limit < self.config.draft_min:
            return [], 0.0
        proposal = None
        if drafter is None:
            proposal = slot.lookup.draft(slot.cached_tokens, limit)
            limit = len(proposal)
        expected = slot.acceptance.expected_accepted(limit)
        k = self._draft_length(expected, batch.size, expected_yield)
        if k == 0:
            slot.acceptance.idle()
            return [], 0.0
        drafts = proposal[:k] if proposal is not None else drafter.draft(slot.id, slot.cached_tokens, k)
        return drafts, expected[len(drafts)]

    def _draft_length(self, expected: list[float], batch_tokens: int, expected_yield: float) -> int:
        if len(expected) <= self.config.draft_min:
            return 0
        costs = self.config.decode_costs
        if costs is None:  # nothing measured: draft as much as is proposed
            return len(expected) - 1
        per_draft = self.config.drafter.seconds_per_token if self.config.drafter is not None else 0.0
        return best_draft_length(costs, expected, batch_tokens, expected_yield, self.config.draft_min, per_draft)

    def _verify(self, slot: Slot) -> None:
        """Sample at the slot's token and at each drafted one in order, keeping drafts
        while they equal what was sampled; the rest of the drafted memory is cut."""
        drafts, indices = slot.drafts, slot.draft_indices
        slot.drafts, slot.draft_indices = [], []
        accepted = 0
        for i, token in enumerate([None, *drafts]):
            if i:
                slot.batch_index = indices[i - 1]
            sampled = self._sample(slot)
            if slot.request is None or slot.state is not SlotState.DECODE:
                break  # finished
            if i < len(drafts) and sampled == drafts[i]:
                slot.cached_tokens.append(sampled)  # its memory was written by this batch
                accepted += 1
                continue
            break
        self.runtime.seq_remove(slot.id, len(slot.cached_tokens), -1)
        slot.draft_rounds += 1
        slot.draft_n += len(drafts)
        slot.draft_accepted += accepted
        slot.acceptance.observe(len(drafts), accepted)

    def _sample(self, slot: Slot) -> int:
        request = slot.request
        index, slot.batch_index = slot.batch_index, -1
        logprob, top = None, None
        constraint = request.constraint
        if constraint is not None and constraint.error:
            self._finish(slot, FinishReason.ERROR, error=f"structured output: {constraint.error}")
            return -1
        if request.logprobs is not None or request.sampling.p_less or constraint is not None:
            logits = logits_row(self.runtime.ctx, index, self.tokenizer.n_vocab)
            if request.logprobs is not None:
                raw = logits.copy()
            if constraint is not None:
                apply_mask(logits, slot.mask_row)
            if request.sampling.p_less and not request.sampling.greedy:
                apply_p_less(logits, request.sampling.temperature)
        if slot.forced_tokens:
            token = slot.forced_tokens.pop(0)
            slot.sampler.accept(token)
        else:
            token = slot.sampler.sample(self.runtime.ctx, index)
        if request.logprobs is not None:
            logprob, top = token_logprobs(raw, token, request.logprobs)
        if constraint is not None and not constraint.accept(token):
            self._finish(slot, FinishReason.ERROR, error=f"structured output rejected token {token}")
            return token
        self._accept_token(slot, token, logprob, top)
        return token

    def _accept_token(
        self, slot: Slot, token: int, logprob: float | None = None, top: list[tuple[int, float]] | None = None
    ) -> None:
        request = slot.request
        now = time.monotonic()
        if slot.n_generated == 0:
            slot.first_token_at = now
        slot.n_generated += 1
        if self.tokenizer.is_eog(token) and not request.ignore_eos:
            self._finish(slot, FinishReason.STOP, eos=True)
            return
        text = slot.text_decoder.feed(self.tokenizer.piece(token))
        if slot.budget is not None and slot.budget.observe(text):
            slot.budget.done = True
            slot.forced_tokens = list(request.reasoning_close_tokens)
        text, stop_word = slot.stop_matcher.feed(text)
        request.emit(TokenEvent(token=token, text=text, logprob=logprob, top_logprobs=top))
        if stop_word is not None:
            self._finish(slot, FinishReason.STOP, stop_word=stop_word)
        elif request.constraint is not None and request.constraint.is_finished():
            self._finish(slot, FinishReason.STOP)
        elif slot.loop_detector is not None and slot.loop_detector.observe(token):
            self._finish(slot, FinishReason.STOP)
        elif 0 <= request.max_tokens <= slot.n_generated:
            self._finish(slot, FinishReason.LENGTH)
        elif slot.n_past + 1 >= self.n_ctx_slot:
            self._finish(slot, FinishReason.LENGTH)
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
    ) -> None:
        request = slot.request
        now = time.monotonic()
        tail = ""
        if stop_word is None and slot.text_decoder is not None:
            tail = slot.stop_matcher.feed(slot.text_decoder.flush())[0] + slot.stop_matcher.flush()
        first = slot.first_token_at or now
        prompt_n = len(request.prompt_tokens) - slot.n_reused
        timings = Timings(
            cache_n=slot.n_reused,
            prompt_n=prompt_n,
            prompt_ms=(first - slot.admitted_at) * 1e3,
            predicted_n=slot.n_generated,
            predicted_ms=(now - first) * 1e3,
            draft_n=slot.draft_n,
            draft_n_accepted=slot.draft_accepted,
            draft_rounds=slot.draft_rounds,
            draft_kind=(("draft-model" if self.config.drafter else "prompt-lookup") if slot.draft_rounds else None),
            cache_tier=slot.cache_tier,
        )
        seed = slot.sampler.seed if slot.sampler is not None else None
        if not (self.config.cache_prompt and request.cache_prompt):
            # an opted-out request donates nothing: forget what its sequence holds
            self.runtime.seq_clear(slot.id)
            slot.cached_tokens.clear()
        slot.release()
        self._record(request, reason, slot.n_generated, now)
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
            )
        )

    def _finish_unstarted(self, request: GenerationRequest, reason: FinishReason, error: str | None = None) -> None:
        with self._admission:
            self._outstanding -= 1
        request.emit(
            FinishEvent(
                reason=reason,
                prompt_tokens=len(request.prompt_tokens),
                completion_tokens=0,
                cached_tokens=0,
                timings=Timings(),
                error=error,
            )
        )

    def _record(self, request: GenerationRequest, reason: FinishReason, n_generated: int, now: float) -> None:
        with self._admission:
            self._outstanding -= 1
        self.stats.sequences_completed += 1
        if reason in (FinishReason.STOP, FinishReason.LENGTH):
            self.stats.requests_completed += 1
            self.stats.prompt_tokens += len(request.prompt_tokens)
            self.stats.completion_tokens += n_generated
            self.stats.generation_seconds += now - request.created

    def _fail_everything(self, message: str) -> None:
        for slot in self.slots:
            if slot.request is not None:
                self._finish(slot, FinishReason.ERROR, error=message)
        for request in self.waiting.drain():
            self._finish_unstarted(request, FinishReason.ERROR, error=message)
