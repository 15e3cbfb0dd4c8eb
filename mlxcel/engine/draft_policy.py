"""How many tokens to draft: the length that maximises the batch's expected tokens
per second, from what each batch size costs to decode on this machine and how far
the slot's recent drafts were accepted.

On a CPU a verify batch is far from free: llama.cpp's kernels switch paths with the
batch size (two tokens can cost twice one, eight cost less than six), so a fixed or
merely acceptance-driven draft length wastes most of the gain. The cost curve is
measured once at start-up and rescaled as decode batches are timed; the acceptance
estimate is a per-position survival curve with an optimistic prior that old evidence
decays back to, so a slot that stopped drafting tries again after a while.
"""

from __future__ import annotations

import bisect
import time

import llama_cpp

from mlxcel.engine.batch import TokenBatch
from mlxcel.engine.compute_gate import COMPUTE_GATE
from mlxcel.engine.core_share import uncontended
from mlxcel.engine.llama_runtime import LlamaRuntime

# A curve measured while other work held the cores has the wrong shape, and one that
# makes every verify batch look dear turns speculation off for good: such a measurement
# raises core_share.Contended, and it is neither used nor kept.


class DecodeCosts:
    """Seconds one `llama_decode` takes for n tokens with logits for each: measured
    at start-up for every size up to 16 and every fourth size past it (llama.cpp's
    CPU kernels work in tiles of 4 and 8 rows), times a scale that follows what
    decode batches take since (the context grows, the machine gets busier)."""

    SCALE_WEIGHT = 0.1  # of each new observation in the running scale
    DENSE_UP_TO = 16  # every size up to this one is measured, then every fourth

    def __init__(self, measured: dict[int, float]) -> None:
        if not measured or min(measured.values()) <= 0 or 1 not in measured:
            raise ValueError("a cost curve needs a positive time for a single token and each size measured")
        self.measured = dict(sorted(measured.items()))
        self.sizes = list(self.measured)
        self.scale = 1.0

    @classmethod
    def sizes_to_measure(cls, max_tokens: int) -> list[int]:
        dense = list(range(1, min(max_tokens, cls.DENSE_UP_TO) + 1))
        sparse = list(range(cls.DENSE_UP_TO + 4, max_tokens + 1, 4))
        if max_tokens > cls.DENSE_UP_TO and max_tokens not in sparse:
            sparse.append(max_tokens)
        return dense + sparse

    @classmethod
    def measure(cls, runtime: LlamaRuntime, max_tokens: int, seq_id: int = 0, repeats: int = 2) -> DecodeCosts:
        """Time batches of up to max_tokens tokens (after a short prefix) on an empty
        sequence that is cleared again afterwards; the fastest of `repeats` runs.
        Other models' engines wait meanwhile (they would skew the timings)."""
        with COMPUTE_GATE.hold(guest=True):
            return cls._measure(runtime, max_tokens, seq_id, repeats)

    @classmethod
    def _measure(cls, runtime: LlamaRuntime, max_tokens: int, seq_id: int, repeats: int) -> DecodeCosts:
        prefix = max(1, min(32, runtime.n_ctx_seq // 4))
        max_tokens = min(max_tokens, runtime.n_batch, runtime.n_ctx_seq - prefix - 1)
        if max_tokens < 1:
            raise RuntimeError("the context is too small to measure batch costs")
        batch = TokenBatch(max(max_tokens, prefix))
        sizes = cls.sizes_to_measure(max_tokens)
        filler = [llama_cpp.llama_vocab_n_tokens(runtime.vocab) // 2 + i for i in range(prefix + sizes[-1])]
        runtime.seq_clear(seq_id)
        try:
            batch.add_span(filler[:prefix], 0, seq_id, logits_last=True)
            if runtime.decode(batch.seal()) != 0:
                raise RuntimeError("llama_decode failed while measuring batch costs")
            best = {n: float("inf") for n in sizes}
            with uncontended(runtime.config.n_threads, "batch costs were measured"):
                for _ in range(repeats):
                    for n in sizes:
                        batch.clear()
                        for i in range(n):
                            batch.add(filler[prefix + i], prefix + i, seq_id, True)
                        started = time.perf_counter()
                        rc = runtime.decode(batch.seal())
                        best[n] = min(best[n], time.perf_counter() - started)
                        runtime.seq_remove(seq_id, prefix, -1)
                        if rc != 0:
                            raise RuntimeError("llama_decode failed while measuring batch costs")
        finally:
            runtime.seq_clear(seq_id)
        return cls(best)

    # an assumed curve's step, and what each further token adds to it: the dearest
    # share measured on CPU hosts here (7.3 ms for one token, 13.0 for two, 35.4 for
    # eight), and a GPU's nearly flat curve
    ASSUMED_STEP_S = 0.01
    ASSUMED_EXTRA = {"cpu": 0.6, "gpu": 0.1}

    @classmethod
    def assumed(cls, max_tokens: int, device: str = "cpu") -> DecodeCosts:
        """A curve for an engine whose start could not measure one (its cores were
        busy): each token past the first adds ASSUMED_EXTRA[device] of a step, and
        observe() scales it to what decodes take. Without any curve every proposal
        would be drafted whole, whatever its acceptance: with one, a draft must earn
        its verify batch, as a measured curve asks."""
        extra = cls.ASSUMED_EXTRA[device]
        return cls({n: cls.ASSUMED_STEP_S * (1.0 + extra * (n - 1)) for n in cls.sizes_to_measure(max(max_tokens, 1))})

    def cost(self, n: int) -> float:
        """Expected seconds for a batch of n tokens. Between measured sizes, the
        dearer neighbour (unmeasured sizes may fall off the fast tiles); past the
        largest, linear."""
        n = max(n, 1)
        known = self.measured.get(n)
        if known is not None:
            return self.scale * known
        sizes = self.sizes
        index = bisect.bisect_left(sizes, n)
        if index < len(sizes):
            return self.scale * max(self.measured[sizes[index - 1]], self.measured[sizes[index]])
        last, first = sizes[-1], sizes[len(sizes) // 2]
        slope = (self.measured[last] - self.measured[first]) / max(1, last - first)
        return self.scale * (self.measured[last] + max(slope, 0.0) * (n - last))

    def observe(self, ubatches: list[int], seconds: float) -> None:
        """A decode batch that llama.cpp ran as micro-batches of these sizes, every
        token with logits, took `seconds` (sizes the curve lacks teach nothing)."""
        known = [self.measured.get(n) for n in ubatches]
        if known and None not in known and seconds > 0:
            self.scale += self.SCALE_WEIGHT * (seconds / sum(known) - self.scale)


class AcceptanceStats:
    """Decayed counts, per draft position, of the rounds that reached that position
    (every earlier draft was accepted) and of those that accepted it there."""

    PRIOR_RATE = 0.9  # optimistic: a slot with no evidence drafts
    PRIOR_WEIGHT = 2.0  # pseudo-rounds of the prior at every position
    ROUND_DECAY = 0.8  # of old evidence per verify round
    IDLE_DECAY = 0.9  # of old evidence per step without a draft

    def __init__(self, max_draft: int, prior_rate: float = PRIOR_RATE) -> None:
        self.prior_rate = prior_rate
        self.reached = [0.0] * max_draft
        self.accepted = [0.0] * max_draft

    def observe(self, drafted: int, accepted: int) -> None:
        self._decay(self.ROUND_DECAY)
        for j in range(min(drafted, accepted + 1, len(self.reached))):
            self.reached[j] += 1.0
            if j < accepted:
                self.accepted[j] += 1.0

    def idle(self) -> None:
        self._decay(self.IDLE_DECAY)

    def _decay(self, factor: float) -> None:
        self.reached = [r * factor for r in self.reached]
        self.accepted = [a * factor for a in self.accepted]

    def expected_accepted(self, k: int) -> list[float]:
        """E[accepted drafts] for draft lengths 0..k (k at most max_draft). Each
        position's acceptance rate is shrunk toward the rate before it (the first
        toward the prior), so positions no draft has reached yet inherit what the
        deepest evidence says instead of falling back to the prior."""
        out = [0.0]
        survival, rate = 1.0, self.prior_rate
        for j in range(min(k, len(self.reached))):
            rate = (self.accepted[j] + self.PRIOR_WEIGHT * rate) / (self.reached[j] + self.PRIOR_WEIGHT)
            survival *= rate
            out.append(out[-1] + survival)
        return out


# a draft must promise this much more than the plain batch: near break-even the
# estimates (acceptance, and a cost curve measured on one sequence) are noisier than
# the gain, and a verify batch has costs the curve does not see
DRAFT_MARGIN = 0.1


def best_draft_length(
    costs: DecodeCosts,
    expected: list[float],
    batch_tokens: int,
    batch_yield: float,
    min_draft: int,
    seconds_per_draft: float = 0.0,
    margin: float = DRAFT_MARGIN,
) -> int:
    """The draft length k (0, or min_draft..len(expected)-1) that maximises the
    batch's expected tokens per second: (batch_yield + E[accepted(k)]) over the cost
    of a batch of batch_tokens + k tokens plus drafting k tokens; 0 unless that beats
    the batch without drafts by `margin`."""
    plain = batch_yield / costs.cost(batch_tokens)
    best_k, best_rate = 0, plain * (1.0 + margin)
    for k in range(max(1, min_draft), len(expected)):
        rate = (batch_yield + expected[k]) / (costs.cost(batch_tokens + k) + k * seconds_per_draft)
        if rate > best_rate:
            best_k, best_rate = k, rate
    return best_k
