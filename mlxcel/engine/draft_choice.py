"""What a decoding slot drafts in a step, and how much of it.

Each decoding slot is asked in turn, its draft sized against the whole batch it joins
(every decoding slot's next token and the drafts planned so far): sized against a
partial batch, the first slots would see a batch dearer per token than the full one
and over-draft. Prompt lookup proposes from the slot's own history and from earlier
requests' outputs (traffic_ngrams), the one its evidence favours; a draft model
drafts only as many tokens as pay. Where llama.cpp splits the batch over per-slot KV
streams, the drafts are then sized again together (draft_plan).
"""

from __future__ import annotations

from mlxcel.engine.draft_model import DraftModel
from mlxcel.engine.draft_plan import DraftOption, SplitBatch, joint_draft_lengths
from mlxcel.engine.draft_policy import DecodeCosts, best_draft_length
from mlxcel.engine.lookup_cache import LookupCaches
from mlxcel.engine.prompt_lookup import LOOKUP_CACHE, TRAFFIC, Proposal
from mlxcel.engine.slots import Slot
from mlxcel.engine.traffic_ngrams import TrafficNgrams


class DraftChooser:
    """The drafting decisions of one engine: `cap` tokens a round at most (0: no
    speculation), fewer than `draft_min` not worth a round, batches priced by
    `decode_costs` (None: draft all that is proposed); `traffic`: earlier requests'
    outputs to draft from beside prompt lookup (None: none); `lookup_caches`: llama.cpp's
    lookup caches, drafted from beside it too (None: none)."""

    def __init__(self, drafter: DraftModel | None, cap: int, draft_min: int, decode_costs: DecodeCosts | None,
                 batch_capacity: int, n_ctx_slot: int, n_ubatch: int, traffic: TrafficNgrams | None = None,
                 lookup_caches: LookupCaches | None = None) -> None:
        self.drafter = drafter
        self.traffic = traffic
        self.lookup_caches = lookup_caches
        self.cap = cap
        self.draft_min = draft_min
        self.decode_costs = decode_costs
        self.batch_capacity = batch_capacity
        self.n_ctx_slot = n_ctx_slot
        self.n_ubatch = n_ubatch

    def option(self, slot: Slot, batch_tokens: int, expected_yield: float) -> DraftOption | None:
        """What a decoding slot could draft and how many of those tokens it would, in
        a batch run whole (none when speculation cannot apply; length 0 when it would
        not pay for itself in this batch). `batch_tokens` and `expected_yield` count
        the batch's decode tokens: every decoding slot's next token (this one's history
        already ends with it) and the drafts planned so far."""
        request = slot.request
        if slot.acceptance is None or request.constraint is not None or slot.forced_tokens:
            return None
        if slot.shifted_keep is not None:  # its history no longer matches its positions: no drafting
            return None
        if request.media:  # a drafter cannot see media, and prompt lookup would copy stand-in ids
            return None
        if slot.budget is not None and not slot.budget.done:
            return None
        room = self.batch_capacity - batch_tokens
        limit = min(room, self.n_ctx_slot - slot.n_past - 2, self.cap)
        if request.max_tokens >= 0:
            limit = min(limit, request.max_tokens - slot.n_generated - 1)
        if limit < self.draft_min:
            return None
        history = slot.cached_tokens
        if self.drafter is None:
            proposals = (slot.lookup.draft(history, limit), slot.lookup.predicted(history, limit))
            # a prediction is what its request drafts; one opted out of reusing the server's
            # state (cache_prompt false) gets the output a cold server gives, near ties included
            if self.traffic is not None and request.cache_prompt and not request.prediction:
                proposals += (self.traffic.draft(history, limit, self.draft_min),)
            if self.lookup_caches is not None and not request.prediction:
                # the dynamic counts hold other requests' outputs: only for those that reuse state
                proposals += (self.lookup_caches.draft(history, limit, self.draft_min, dynamic=request.cache_prompt),)
            return self._proposed(slot, proposals, batch_tokens, expected_yield)
        stats = slot.acceptance.stats(0)
        expected = stats.expected_accepted(limit)
        if slot.lookup is not None:  # the request's prediction, where it is expected to hold longer
            option = self._proposed(slot, (slot.lookup.predicted(history, limit),), batch_tokens, expected_yield,
                                    rival=expected[-1])
            if option is not None:  # the draft model runs not at all this step
                return option
        k = self._length(expected, batch_tokens, expected_yield)
        if k == 0:
            stats.idle()  # a draft model's drafts are judged only when verified: evidence fades back to the prior
            return None
        drafts = self.drafter.draft(slot.id, slot.cached_tokens, k)
        slot.acceptance.follow(drafts, 0)
        return DraftOption(-1, drafts, expected, len(drafts)) if drafts else None

    def _proposed(self, slot: Slot, proposals: tuple[Proposal, ...], batch_tokens: int, expected_yield: float,
                  rival: float = -1.0) -> DraftOption | None:
        """Of proposals already made (prompt lookup's, the prediction's), the one its
        acceptance class expects the most accepted tokens from (on a tie, the first), and
        only one expected to beat `rival` (a draft model's expectation), drafted as far as
        it pays. One not drafted is still followed against what the slot emits (unless
        one is followed already), so the evidence about undrafted proposals stays fresh
        at no cost."""
        expected, proposal = [], None
        for candidate in proposals:
            if candidate.tokens:
                estimate = slot.acceptance.stats(candidate.kind).expected_accepted(len(candidate.tokens))
                if estimate[-1] > (expected[-1] if proposal is not None else rival):
                    expected, proposal = estimate, candidate
        if proposal is None:
            return None
        k = self._length(expected, batch_tokens, expected_yield, drafted=True)
        if k or not slot.acceptance.following:
            slot.acceptance.follow(proposal.tokens, proposal.kind)
        return DraftOption(-1, proposal.tokens, expected, k, predicted=proposal.predicted,
                           traffic=TRAFFIC <= proposal.kind < LOOKUP_CACHE,
                           lookup_cache=proposal.kind == LOOKUP_CACHE)

    def _length(self, expected: list[float], batch_tokens: int, expected_yield: float, drafted: bool = False) -> int:
        if len(expected) <= self.draft_min:
            return 0
        if self.decode_costs is None:  # nothing measured: draft as much as is proposed
            return len(expected) - 1
        # a draft model's tokens cost their drafting; proposals already made (`drafted`) none
        per_draft = self.drafter.seconds_per_token if self.drafter is not None and not drafted else 0.0
        return best_draft_length(self.decode_costs, expected, batch_tokens, expected_yield, self.draft_min, per_draft)

    def lengths_together(self, seq_ids: list[int], options: list[DraftOption], n_planned: int) -> list[int]:
        """The options' draft lengths as one plan, priced as llama.cpp splits a batch of
        these sequences (one decode token each, in `seq_ids` order) over their KV
        streams, where each option was sized as if the batch ran whole."""
        batch = SplitBatch(seq_ids, self.decode_costs, self.n_ubatch)
        return joint_draft_lengths(batch, options, self.batch_capacity - n_planned, self.draft_min)
