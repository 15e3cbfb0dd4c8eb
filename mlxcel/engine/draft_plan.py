"""The drafts of every slot in a decode batch, sized together against the
micro-batches llama.cpp will cut that batch into.

With a KV stream per slot (several slots, no --kv-unified) llama_decode splits a
batch "equally": each micro-batch takes a run of consecutive sequence ids and the same
number of tokens from each of them. So drafts of equal length on neighbouring slots
run together as one wide micro-batch, while one slot's drafts beside other slots'
single tokens run as a micro-batch of their own, after them (4 slots + 8 drafts on
one: 52 ms where 12 tokens of one sequence take 38, SmolLM2 on 2 cores,
bench/draft_batches.py). Each slot first sizes its draft as if the batch ran whole
(draft_policy.best_draft_length); this plan then prices a few whole-batch
alternatives as the split they make (that plan, none, each slot's draft dropped,
every draft cut or extended to one common length) and keeps the one with the most
expected tokens per second. Sized slot by slot against the split instead, every
slot sees its drafts alone and holds back where all of them drafting together
would pay (tried and measured: bench/README, "What a draft costs beside other
slots' tokens").
"""

from __future__ import annotations

from dataclasses import dataclass

from mlxcel.engine.draft_policy import DRAFT_MARGIN, DecodeCosts


def equal_split(spans: list[tuple[int, int]], n_ubatch: int) -> list[int]:
    """The sizes of the micro-batches llama.cpp's sequential equal split cuts a batch
    into (llama_batch_allocr::split_equal): `spans` are (sequence id, tokens) in batch
    order, each sequence's tokens together. Each micro-batch takes the first sequence
    with tokens left and every later one whose id follows the last one taken, and from
    each of them the same number of tokens: as many as the shortest has left, within
    n_ubatch."""
    left = [[seq, n] for seq, n in spans if n > 0]
    sizes = []
    while left:
        chosen = [left[0]]
        for span in left[1:]:
            if span[0] == chosen[-1][0] + 1:
                chosen.append(span)
        each = max(1, min(min(span[1] for span in chosen), n_ubatch // len(chosen)))
        for span in chosen:
            span[1] -= each
        sizes.append(each * len(chosen))
        left = [span for span in left if span[1] > 0]
    return sizes


@dataclass
class DraftOption:
    """What one decoding slot could draft in this batch."""

    index: int  # its span among the batch's decode spans
    tokens: list[int]  # the drafts it may verify, in order (a drafter's are already made)
    expected: list[float]  # expected accepted drafts for each length 0..len(tokens)
    length: int  # what the slot's own sizing chose
    predicted: bool = False  # the tokens come from the request's predicted output
    traffic: bool = False  # the tokens come from earlier requests' outputs (traffic_ngrams)
    lookup_cache: bool = False  # the tokens come from llama.cpp's lookup caches (lookup_cache)


class SplitBatch:
    """The decode spans of one batch (sequence ids in batch order, one token each
    before drafts) priced as the micro-batches they split into."""

    def __init__(self, seq_ids: list[int], costs: DecodeCosts, n_ubatch: int) -> None:
        self.seq_ids = seq_ids
        self.costs = costs
        self.n_ubatch = max(1, n_ubatch)

    def seconds(self, drafts: dict[int, int]) -> float:
        """What the batch costs with drafts[index] drafts on span `index`."""
        spans = [(seq, 1 + drafts.get(i, 0)) for i, seq in enumerate(self.seq_ids)]
        return sum(self.costs.cost(n) for n in equal_split(spans, self.n_ubatch))


def joint_draft_lengths(batch: SplitBatch, options: list[DraftOption], room: int, min_draft: int,
                        margin: float = DRAFT_MARGIN) -> list[int]:
    """How many drafts each option verifies (in the order given): the candidate plan
    with the most expected tokens per second for the split batch, none unless that
    beats the batch without drafts by `margin`. `room` is how many drafts the batch
    can still take beyond those the slots chose."""
    n = len(batch.seq_ids)
    chosen = tuple(option.length for option in options)
    budget = sum(chosen) + room
    candidates = {chosen}
    for i, k in enumerate(chosen):
        if k:
            candidates.add(chosen[:i] + (0,) + chosen[i + 1 :])
    longest = max(len(option.tokens) for option in options)
    levels = {k for k in chosen if k} | {longest} | {2**i for i in range(1, 7) if 2**i < longest}
    for level in levels:
        if level >= min_draft:  # one common length: for the slots that chose to draft, and for all
            lengths = [min(level, len(o.tokens)) for o in options]
            lengths = [k if k >= min_draft else 0 for k in lengths]  # too short a proposal sits out
            candidates.add(tuple(k if o.length else 0 for k, o in zip(lengths, options)))
            candidates.add(tuple(lengths))
    zero = tuple(0 for _ in options)
    best, best_rate = zero, n / batch.seconds({}) * (1.0 + margin)
    for plan in candidates:
        if plan == zero or sum(plan) > budget or any(0 < k < min_draft for k in plan):
            continue
        gain = sum(option.expected[k] for option, k in zip(options, plan))
        rate = (n + gain) / batch.seconds({option.index: k for option, k in zip(options, plan) if k})
        if rate > best_rate:
            best, best_rate = plan, rate
    return list(best)

