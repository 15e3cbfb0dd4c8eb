"""What one engine step decodes: every decoding slot's next token (with the drafts
speculation sizes for it), then chunks of the prefilling slots' prompts within what
the batch has room for, and the writing of that plan into the llama batch (undone
when llama_decode refuses it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mlxcel.engine.batch import TokenBatch
from mlxcel.engine.draft_choice import DraftChooser
from mlxcel.engine.draft_plan import DraftOption, equal_split
from mlxcel.engine.media_prefill import MediaChunk, plan_media_chunk
from mlxcel.engine.slots import Slot, SlotState, SlotTable


@dataclass(eq=False)
class Span:
    """One slot's tokens in a batch: a decoding slot's next token and its drafts, or
    a chunk of a prefilling slot's prompt."""

    slot: Slot
    tokens: list[int]
    start: int  # the position of tokens[0]
    prefill: bool
    last: bool = True  # a prefill chunk that ends the prompt (its last token wants logits)
    n_before: int = 0  # tokens the slot's sequence held before this batch

    @property
    def samples(self) -> bool:
        return not self.prefill or self.last


class StepPlanner:
    """Plans each step's batch over the engine's slots.

    `shift_context(slot)` makes room in a slot whose next token would take its
    context's last cell and says whether the slot goes on (None: no context shift, the
    slot's request ends at the context's end instead); `request_failed(slot, phase,
    exc)` fails a slot's request alone (drafting for it raised). `lora`, when set, is
    the one set of LoRA scales this step decodes: the slots of other sets wait for
    their turn (lora_sets.py)."""

    def __init__(self, slots: SlotTable, capacity: int, drafts: DraftChooser, *, prefill_chunk: int,
                 n_ctx_slot: int, split_kv: bool, n_ubatch: int, sizes_drafts_together: bool,
                 shift_context: Callable[[Slot], bool] | None,
                 request_failed: Callable[[Slot, str, Exception], None]) -> None:
        self.slots = slots
        self.capacity = capacity
        self.drafts = drafts
        self.prefill_chunk = prefill_chunk
        self.n_ctx_slot = n_ctx_slot
        self.split_kv = split_kv  # each slot has a KV stream of its own: llama.cpp splits batches equally
        self.n_ubatch = n_ubatch
        self.sizes_drafts_together = sizes_drafts_together and split_kv
        self.shift_context = shift_context
        self.request_failed = request_failed
        self.lora: tuple[float, ...] | None = None

    def _takes(self, slot: Slot, state: SlotState) -> bool:
        return slot.state is state and (self.lora is None or slot.lora == self.lora)

    def prefilling(self) -> list[Slot]:
        found = [s for s in self.slots if self._takes(s, SlotState.PREFILL)]
        if len(found) > 1:
            found.sort(key=lambda s: s.admitted_at)
        return found

    def media(self) -> MediaChunk | None:
        """This step's media prefill chunk, if a prefilling slot stands at media."""
        prefilling = self.prefilling()
        if not prefilling:
            return None
        decoding = any(self._takes(slot, SlotState.DECODE) for slot in self.slots)
        return plan_media_chunk(prefilling, self.prefill_chunk if decoding else self.capacity)

    def plan(self, media_rows: int = 0) -> list[Span]:
        """This step's batch as spans: every decoding slot's next token (and drafts),
        then prompt chunks of prefilling slots, oldest first, within the budget (less
        the rows of a media chunk decoded this step). A prompt's text chunk stops where
        its next media span starts."""
        spans, options, n_planned = self._decoding()
        n_decode = len(spans)
        room = self.capacity - sum(len(span.tokens) for span in spans)
        # alone, a micro-batch a step: as fast as one call of the whole prompt (llama.cpp cuts
        # it so), and a request cancelled meanwhile (its client gone) stops within a chunk
        budget = min(room, self.n_ubatch if n_decode == 0 else self.prefill_chunk) - media_rows
        for slot in self.prefilling():
            if budget <= 0:
                break
            start = slot.n_past
            take = min(budget, slot.prompt_remaining)
            if slot.request.media:
                take = slot.request.media.text_run(start, take)
                if take == 0:
                    continue  # at media: a media chunk takes it
            chunk = slot.request.prompt_tokens[start : start + take]
            spans.append(Span(slot, chunk, start, prefill=True, last=take == slot.prompt_remaining))
            budget -= take
        # in sequence order: llama.cpp splits a batch over per-slot KV streams into runs of
        # consecutive sequence ids, so out of order it computes more, smaller ubatches
        if len(spans) > 1:
            spans.sort(key=lambda span: span.slot.id)
        return spans

    def _decoding(self) -> tuple[list[Span], list[DraftOption], int]:
        """The decoding slots' spans, the draft options behind them and the batch's size."""
        spans: list[Span] = []
        # a draft is sized against the whole batch it joins (every decoding slot's next
        # token and the drafts planned so far): sized against a partial batch, the
        # first slots see a batch dearer per token than the full one and over-draft
        decoding = [slot for slot in self.slots if self._takes(slot, SlotState.DECODE)]
        n_planned = len(decoding)
        expected_yield = float(n_planned)  # tokens this batch is expected to emit
        options: list[DraftOption] = []
        for slot in decoding:
            full = slot.n_past + 1 >= self.n_ctx_slot  # its next token would take the last cell
            if full and self.shift_context is not None and not self.shift_context(slot):
                continue
            start = slot.n_past
            slot.cached_tokens.append(slot.next_token)  # drafting reads the history through it
            try:
                option = self.drafts.option(slot, n_planned, expected_yield)
            except Exception as exc:  # noqa: BLE001 - one request's failure is its own
                slot.cached_tokens.pop()
                self.request_failed(slot, "drafting", exc)
                continue
            slot.cached_tokens.pop()
            drafts: list[int] = []
            if option is not None:
                option.index = len(spans)
                options.append(option)
                drafts = option.tokens[: option.length]
                slot.drafts_predicted = option.predicted
                slot.drafts_traffic = option.traffic
                slot.drafts_lookup_cache = option.lookup_cache
                expected_yield += option.expected[option.length]
            spans.append(Span(slot, [slot.next_token, *drafts], start, prefill=False))
            n_planned += len(drafts)
        # when no slot drafts, each was sized against the plain batch, and split, drafts cost no less
        if self.sizes_drafts_together and len(spans) > 1 and any(option.length for option in options):
            lengths = self.drafts.lengths_together([span.slot.id for span in spans], options, n_planned)
            for option, k in zip(options, lengths):
                span = spans[option.index]
                span.tokens = [span.tokens[0], *option.tokens[:k]]
        return spans, options, n_planned

    def ubatches(self, spans: list[Span]) -> list[int]:
        """The micro-batch sizes llama_decode runs these spans as."""
        if not self.split_kv:
            return [sum(len(span.tokens) for span in spans)]
        return equal_split([(span.slot.id, len(span.tokens)) for span in spans], self.n_ubatch)


def fill_batch(batch: TokenBatch, spans: list[Span]) -> int:
    """Write the spans into the batch; each slot's memory record grows with them.
    Returns how many prompt chunks went in."""
    batch.clear()
    chunks = 0
    for span in spans:
        slot = span.slot
        span.n_before = slot.n_past
        if span.prefill:
            index = batch.add_span(span.tokens, span.start, slot.id, logits_last=span.last)
            slot.batch_index = index if span.last else -1
            slot.cached_tokens.extend(span.tokens)
            chunks += 1
        else:
            slot.batch_index = batch.add(span.tokens[0], span.start, slot.id, True)
            slot.drafts = span.tokens[1:]
            slot.draft_indices = [
                batch.add(token, span.start + 1 + i, slot.id, True) for i, token in enumerate(slot.drafts)
            ]
            slot.cached_tokens.append(span.tokens[0])
    return chunks


def rewind(spans: list[Span], seq_remove: Callable[[int, int, int], object]) -> None:
    """Undo `fill_batch` for a batch llama_decode refused (its memory may hold part of it)."""
    for span in spans:
        slot = span.slot
        del slot.cached_tokens[span.n_before :]
        seq_remove(slot.id, span.n_before, -1)
        slot.batch_index = -1
        slot.drafts, slot.draft_indices = [], []
