"""Decode slots: one llama.cpp sequence each, with the tokens its KV memory holds."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from mlxcel.engine.draft_policy import AcceptanceStats
from mlxcel.engine.line_limits import LineLimits
from mlxcel.engine.prompt_lookup import PromptLookup
from mlxcel.engine.request import GenerationRequest
from mlxcel.engine.sampling import SamplerChain
from mlxcel.engine.slot_task import SlotTask, prompt_processed
from mlxcel.engine.stop_strings import StopStringMatcher
from mlxcel.engine.text_decoder import IncrementalTextDecoder


@dataclass
class ReasoningBudget:
    """Counts reasoning tokens; once `limit` is reached the close marker is forced."""

    limit: int
    open: bool  # inside a reasoning block now
    open_marker: str
    close_marker: str
    spent: int = 0
    done: bool = False
    window: str = ""

    def exhausted(self) -> bool:
        return self.open and not self.done and self.spent >= self.limit

    def observe(self, text: str) -> bool:
        """Account one generated token's text; True when the close marker must be forced now."""
        if self.done:
            return False
        self.window = (self.window + text)[-2 * max(len(self.open_marker), len(self.close_marker)):]
        if not self.open:
            if self.open_marker in self.window:
                self.open, self.window = True, ""
            return self.exhausted()
        if self.close_marker in self.window:
            self.done = True
            return False
        self.spent += 1
        return self.exhausted()


class SlotState(str, enum.Enum):
    IDLE = "idle"
    PREFILL = "queued"  # the spec's name for a slot still consuming its prompt
    DECODE = "decoding"


@dataclass
class Slot:
    id: int
    state: SlotState = SlotState.IDLE
    cached_tokens: list[int] = field(default_factory=list)  # what sequence `id` holds, by position
    lora: tuple[float, ...] = ()  # the LoRA scales its sequence was computed under (lora_sets.py)
    last_used: float = 0.0
    # the running request, if any
    request: GenerationRequest | None = None
    task: SlotTask | None = None  # what /slots shows of it, kept once it ends (llama-server's last task)
    sampler: SamplerChain | None = None
    text_decoder: IncrementalTextDecoder | None = None
    stop_matcher: StopStringMatcher | None = None
    loop_detector: object | None = None  # engine.loop_detection.LoopDetector when enabled
    forced_tokens: list[int] = field(default_factory=list)  # emitted next instead of sampling
    budget: ReasoningBudget | None = None
    mask_row: object | None = None  # this step's structured-output mask (numpy int32 row)
    cache_tier: str = "miss"  # where the reused prefix came from: slot, exact, block or miss
    lookup: PromptLookup | None = None  # prompt-lookup drafting, when on
    drafts: list[int] = field(default_factory=list)  # drafted this step, after next_token
    draft_indices: list[int] = field(default_factory=list)
    draft_n: int = 0
    draft_accepted: int = 0
    draft_rounds: int = 0
    # per draft position, the rounds that accepted the draft there (llama-server's
    # n_accepted_per_pos: sized to the most drafted a round at the first verify)
    accepted_at: list[int] = field(default_factory=list)
    drafts_predicted: bool = False  # this step's drafts come from the request's predicted output
    drafts_traffic: bool = False  # this step's drafts come from earlier requests' outputs
    drafts_lookup_cache: bool = False  # this step's drafts come from the lookup caches
    prediction_accepted: int = 0  # drafted tokens of the prediction the output kept
    prediction_rejected: int = 0  # and those it did not
    acceptance: AcceptanceStats | None = None  # how far recent drafts held, when speculating
    shifted_keep: int | None = None  # after a context shift: the prefix whose memory is still exact
    unsaved: bool = False  # holds a finished request's tokens the host cache may not have yet
    n_reused: int = 0  # prompt tokens taken from the slot's previous contents
    n_generated: int = 0
    next_token: int = -1  # sampled, not yet decoded
    batch_index: int = -1  # where this slot's logits are in the current batch
    admitted_at: float = 0.0
    wait_s: float = 0.0  # from the request's submission to its admission into this slot
    restore_s: float = 0.0  # admission itself: saving, copying or restoring the reused prefix
    first_token_at: float = 0.0
    line_limits: LineLimits | None = None

    @property
    def n_past(self) -> int:
        return len(self.cached_tokens)

    @property
    def prompt_remaining(self) -> int:
        assert self.request is not None
        return len(self.request.prompt_tokens) - self.n_past

    def begin(self, request: GenerationRequest, n_reused: int, sampler: SamplerChain, loop_detector=None) -> None:
        self.request = request
        self.task = SlotTask.of(request)
        request.taken_by = self.id
        self.sampler = sampler
        self.text_decoder = IncrementalTextDecoder()
        self.stop_matcher = StopStringMatcher(request.stop)
        self.n_reused = n_reused
        self.n_generated = 0
        self.next_token = -1
        self.batch_index = -1
        self.admitted_at = time.monotonic()
        self.first_token_at = 0.0
        self.line_limits = LineLimits.for_request(request.n_indent, request.t_max_predict_ms)
        self.loop_detector = loop_detector
        self.lookup = None
        self.drafts, self.draft_indices = [], []
        self.draft_n = self.draft_accepted = self.draft_rounds = 0
        self.accepted_at = []
        self.drafts_predicted = self.drafts_traffic = self.drafts_lookup_cache = False
        self.prediction_accepted = self.prediction_rejected = 0
        self.acceptance = None
        self.forced_tokens = []
        self.budget = None
        self.shifted_keep = None
        if request.reasoning_budget is not None and all(request.reasoning_markers):
            self.budget = ReasoningBudget(request.reasoning_budget, request.reasoning_open_at_start,
                                          *request.reasoning_markers)
            if self.budget.exhausted():
                self.budget.done = True
                self.forced_tokens = list(request.reasoning_close_tokens)
        self.state = SlotState.PREFILL

    def release(self) -> None:
        # a request that opted out of prompt caching leaves nothing for the host cache
        opted_in = self.request is None or self.request.cache_prompt
        if self.request is not None and self.task is not None:
            processed = prompt_processed(self.n_past, len(self.request.prompt_tokens), self.n_reused)
            self.task = self.task.ended(processed, self.n_generated)
        if self.sampler is not None:
            self.sampler.free()
        self.request = None
        self.sampler = None
        self.text_decoder = None
        self.stop_matcher = None
        self.loop_detector = None
        self.forced_tokens = []
        self.budget = None
        self.batch_index = -1
        self.state = SlotState.IDLE
        self.last_used = time.monotonic()
        self.unsaved = bool(self.cached_tokens) and opted_in


def common_prefix_length(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class SlotTable:
    def __init__(self, n_slots: int, contiguous: bool = False) -> None:
        self.slots = [Slot(id=i) for i in range(n_slots)]
        # keep busy slots in one run of ids where nothing is lost by it: with a KV stream
        # per slot llama.cpp decodes each run of consecutive busy slots as a micro-batch
        # of its own (slots 0, 1, 3 take 18.6 ms a step where 0, 1, 2 take 16.4, SmolLM2)
        self.contiguous = contiguous

    def __iter__(self):
        return iter(self.slots)

    def __len__(self) -> int:
        return len(self.slots)

    def idle(self) -> list[Slot]:
        return [s for s in self.slots if s.state is SlotState.IDLE]

    def any_busy(self) -> bool:
        for slot in self.slots:
            if slot.state is not SlotState.IDLE:
                return True
        return False

    def occupancy(self) -> tuple[int, int]:
        """How many slots hold a request, and the most tokens any slot's memory holds."""
        n_busy = longest = 0
        for slot in self.slots:
            if slot.request is not None:
                n_busy += 1
            n = len(slot.cached_tokens)
            if n > longest:
                longest = n
        return n_busy, longest

    def choose(self, prompt: list[int], reuse: bool, pinned: int = -1,
               lora: tuple[float, ...] = ()) -> tuple[Slot, int] | None:
        """The idle slot sharing the longest prefix with `prompt` and the length of
        that prefix (none with a slot computed under other LoRA scales than `lora`);
        on a tie, one whose tokens need no saving first (so admission does not wait
        for a copy to the host cache), then the least recently used. With reuse off,
        an empty slot if there is one, else the least recently used, so others'
        prefixes survive. `pinned` >= 0: that slot, if idle."""
        idle = self.idle()
        if pinned >= 0:
            idle = [s for s in idle if s.id == pinned]
        if not idle:
            return None
        runs = self._runs_with if self.contiguous and len(idle) > 1 else (lambda slot: 0)
        if not reuse:
            return min(idle, key=lambda s: (bool(s.cached_tokens), runs(s), s.last_used)), 0
        def shared(slot: Slot) -> int:
            return common_prefix_length(slot.cached_tokens, prompt) if slot.lora == lora else 0

        best = max(idle, key=lambda s: (shared(s), not s.unsaved, -runs(s), -s.last_used))
        return best, shared(best)

    def _runs_with(self, slot: Slot) -> int:
        """How many runs of consecutive ids the busy slots would form with `slot` busy too."""
        busy = {s.id for s in self.slots if s.state is not SlotState.IDLE} | {slot.id}
        return sum(1 for i in busy if i - 1 not in busy)
