"""Sampling parameters and the per-slot llama.cpp sampler chain built from them.

The chain is llama-server's: logit biases first, then the samplers in the request's
order (by default penalties, DRY, top-n-sigma, top-k, typical-p, top-p, min-p, XTC,
temperature with its dynamic range), then a seeded draw (or adaptive-p when the order
names it). Mirostat 1 or 2 replaces the whole order with temperature and mirostat.
Temperature <= 0 is greedy: the samplers that can change the argmax (penalties, DRY,
XTC, infill) still run, in order, before it. p-less is not a llama.cpp sampler: the
engine applies it to the logits before the chain.

Plain greedy (temperature <= 0, nothing that can move the argmax, no logit bias but
the -inf bans of ignore_eos) skips the chain: llama_sampler_sample would copy the
whole vocabulary into a candidates array (1.8 MB on a 152k vocabulary) to take its
argmax; one C call (`greedy_token`) takes it on the logits row in place (the lowest
id on ties, as llama.cpp's greedy sampler), ~30x cheaper. The chain is still built: forced tokens
are accepted into it, and it is what every other request samples with. A chain that
cuts to its top k before reading the whole vocabulary (the default order does) runs on
the few hundred tokens that can survive the cut (`Narrowing`).

The chain's history is llama-server's: before the first draw it accepts the prompt
(its text tokens), so the repeat penalties and DRY count what the prompt repeats. The
engine spreads those accepts over the prompt's prefill steps (`prime_some`).
"""

from __future__ import annotations

import ctypes
import math
import secrets
from dataclasses import dataclass, field

import llama_cpp
import numpy as np

from mlxcel.engine.candidates import Candidates, post_sampling_probs
from mlxcel.engine.llama_runtime import greedy_token
from mlxcel.engine.narrowing import Narrowing
from mlxcel.engine.sampler_order import DEFAULT_ORDER

DEFAULT_SEED = 0xFFFFFFFF  # llama.cpp's "pick a random seed"
DEFAULT_DRY_BREAKERS = ("\n", ":", '"', "*")


@dataclass
class SamplingParams:
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    top_n_sigma: float = -1.0  # <= 0: off
    p_less: bool = False
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 0  # 0: the whole context (the spec's convention)
    dry_sequence_breakers: tuple[str, ...] = DEFAULT_DRY_BREAKERS
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    seed: int = DEFAULT_SEED
    logit_bias: dict[int, float] = field(default_factory=dict)
    min_keep: int = 0
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    mirostat: int = 0  # 0 off, 1 Mirostat, 2 Mirostat 2.0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    adaptive_target: float = -1.0
    adaptive_decay: float = 0.9
    samplers: tuple[str, ...] = DEFAULT_ORDER

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def resolved_seed(self) -> int:
        """The seed actually used: a fresh random one when none was given."""
        if self.seed is None or self.seed < 0 or self.seed == DEFAULT_SEED:
            return secrets.randbits(32) & 0x7FFFFFFF
        return self.seed & 0xFFFFFFFF


_ARGMAX_MOVERS = frozenset({"penalties", "dry", "xtc", "infill"})


class SamplerChain:
    """A llama_sampler chain; sample() reads the logits of one batch output."""

    def __init__(
        self,
        params: SamplingParams,
        vocab: llama_cpp.llama_vocab_p,
        n_vocab: int,
        context_size: int,
        banned_tokens: frozenset[int] = frozenset(),
    ) -> None:
        self._ptr = None
        self.seed = params.resolved_seed()
        self._vocab = vocab
        self._context_size = context_size
        self._greedy = params.greedy
        self._n_vocab = n_vocab
        self._candidates = Candidates(n_vocab)
        self._added: list[str] = []  # the samplers in the chain, by name
        self._ptr = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        self._address = ctypes.cast(self._ptr, ctypes.c_void_p).value
        for sampler in self._samplers(params, n_vocab, banned_tokens):
            llama_cpp.llama_sampler_chain_add(self._ptr, sampler)
        # the ids to set to -inf before an argmax, when the chain is a plain argmax
        self.argmax_bans: np.ndarray | None = None
        if self._added in (["greedy"], ["bans", "greedy"]):
            self.argmax_bans = np.array(sorted(self._bans), dtype=np.int32)
        penalty_window = self._window(params.repeat_last_n, zero_means_all=False)
        self.narrowing = None if self.argmax_bans is not None else Narrowing.of_chain(
            self._added, params.top_k, self._biased, penalty_window)
        # how many of the latest tokens the chain's history reads (penalties, DRY)
        self._unprimed: list[int] = []  # prompt tokens prime() noted and the chain has not accepted yet
        self.history = max(penalty_window if "penalties" in self._added else 0,
                           self._window(params.dry_penalty_last_n, zero_means_all=True) if "dry" in self._added else 0)

    def _window(self, last_n: int, zero_means_all: bool) -> int:
        """A penalty window in tokens: -1 (and 0 where it means "all") is the slot's
        context, and nothing a client sends makes llama.cpp keep a longer history
        than the slot can hold."""
        if last_n < 0 or (zero_means_all and last_n == 0):
            return self._context_size
        return min(last_n, self._context_size)

    def _samplers(self, p: SamplingParams, n_vocab: int, banned: frozenset[int]):
        biases = {t: b for t, b in p.logit_bias.items() if 0 <= t < n_vocab}
        for t in banned:
            biases[t] = -math.inf
        self._bans = {t for t, b in biases.items() if b == -math.inf}
        self._biased = set(biases)
        if biases:
            arr = (llama_cpp.llama_logit_bias * len(biases))(
                *(llama_cpp.llama_logit_bias(token=t, bias=b) for t, b in biases.items())
            )
            self._added.append("bans" if len(self._bans) == len(biases) else "logit_bias")
            yield llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(biases), arr)
        if p.mirostat:
            yield from self._mirostat(p, n_vocab)
            return
        # greedy keeps only what can move the argmax; the other samplers keep the top token
        order = [n for n in p.samplers if n in _ARGMAX_MOVERS] if p.greedy else p.samplers
        for name in order:
            sampler = self._sampler(name, p, n_vocab)
            if sampler is not None:
                self._added.append(name)
                yield sampler
        if p.greedy:
            self._added.append("greedy")
            yield llama_cpp.llama_sampler_init_greedy()
        elif "adaptive_p" in p.samplers:
            yield llama_cpp.llama_sampler_init_adaptive_p(p.adaptive_target, p.adaptive_decay, self.seed)
        else:
            yield llama_cpp.llama_sampler_init_dist(self.seed)

    def _mirostat(self, p: SamplingParams, n_vocab: int):
        self._added.append("mirostat")
        if p.greedy:
            yield llama_cpp.llama_sampler_init_greedy()
            return
        yield llama_cpp.llama_sampler_init_temp(p.temperature)
        if p.mirostat == 1:
            yield llama_cpp.llama_sampler_init_mirostat(n_vocab, self.seed, p.mirostat_tau, p.mirostat_eta, 100)
        else:
            yield llama_cpp.llama_sampler_init_mirostat_v2(self.seed, p.mirostat_tau, p.mirostat_eta)

    def _sampler(self, name: str, p: SamplingParams, n_vocab: int):
        """One llama.cpp sampler, or None where its settings make it a no-op."""
        min_keep = max(1, p.min_keep)
        if name == "penalties":
            if p.repeat_last_n == 0 or (p.repeat_penalty == 1.0 and p.frequency_penalty == 0.0
                                        and p.presence_penalty == 0.0):
                return None
            return llama_cpp.llama_sampler_init_penalties(
                n_vocab, self._window(p.repeat_last_n, zero_means_all=False),
                p.repeat_penalty, p.frequency_penalty, p.presence_penalty)
        if name == "dry":
            if p.dry_multiplier <= 0.0:
                return None
            breakers = [b.encode("utf-8") for b in p.dry_sequence_breakers if b]
            arr = (ctypes.c_char_p * max(1, len(breakers)))(*breakers)
            return llama_cpp.llama_sampler_init_dry(
                self._vocab, p.dry_multiplier, p.dry_base, p.dry_allowed_length,
                self._window(p.dry_penalty_last_n, zero_means_all=True), arr, len(breakers))
        if name == "top_n_sigma":
            return llama_cpp.llama_sampler_init_top_n_sigma(p.top_n_sigma) if p.top_n_sigma > 0.0 else None
        if name == "top_k":
            return llama_cpp.llama_sampler_init_top_k(p.top_k) if 0 < p.top_k < n_vocab else None
        if name == "typ_p":
            return llama_cpp.llama_sampler_init_typical(p.typical_p, min_keep) if p.typical_p < 1.0 else None
        if name == "top_p":
            return llama_cpp.llama_sampler_init_top_p(p.top_p, min_keep) if p.top_p < 1.0 else None
        if name == "min_p":
            return llama_cpp.llama_sampler_init_min_p(p.min_p, min_keep) if p.min_p > 0.0 else None
        if name == "xtc":
            if p.xtc_probability <= 0.0:
                return None
            return llama_cpp.llama_sampler_init_xtc(p.xtc_probability, p.xtc_threshold, min_keep, self.seed)
        if name == "temperature":
            return llama_cpp.llama_sampler_init_temp_ext(p.temperature, p.dynatemp_range, p.dynatemp_exponent)
        if name == "infill":
            return llama_cpp.llama_sampler_init_infill(self._vocab)
        return None  # adaptive_p: the final draw

    def prime(self, prompt: list[int]) -> None:
        """Note the prompt's text tokens the chain's history must hold before its first
        draw, as llama-server primes it (only the last ones its samplers keep matter).
        `prime_some` accepts them a share at a time while the prompt prefills; whatever
        is left is accepted before the chain's first draw or accept."""
        if not self.history:
            return
        text = [t for t in prompt if t >= 0]  # media positions hold negative stand-ins
        self._unprimed = text[-self.history :]

    @property
    def priming(self) -> bool:
        """Some of the prompt's noted tokens are not in the chain's history yet."""
        return bool(self._unprimed)

    def prime_some(self, limit: int) -> None:
        """Accept up to `limit` more of the prompt's noted tokens (~1 us each: a
        32k-token window at once would hold every other slot for ~40 ms)."""
        part = self._unprimed[:limit]
        del self._unprimed[:limit]
        accept, chain = llama_cpp.llama_sampler_accept, self._ptr
        for token in part:
            accept(chain, token)
        if self.narrowing is not None:
            self.narrowing.accepted_all(part)

    def _finish_priming(self) -> None:
        """Whatever of the prompt is still unaccepted, before the chain draws or accepts."""
        if self._unprimed:
            self.prime_some(len(self._unprimed))

    def sample(self, ctx: llama_cpp.llama_context_p, batch_index: int) -> int:
        """The token for one batch output (whose logits row may already be masked)."""
        self._finish_priming()
        if self.argmax_bans is not None:
            return greedy_token(ctx, batch_index, self._n_vocab, self.argmax_bans)
        if self.narrowing is not None:
            token = self._candidates.pick_narrowed(self._address, ctx, batch_index, self.narrowing)
            if token is not None:  # the chain accepted it
                self.narrowing.accepted(token)
                return token
        token = int(llama_cpp.llama_sampler_sample(self._ptr, ctx, batch_index))
        if self.narrowing is not None:
            self.narrowing.accepted(token)
        return token

    def sample_with_probs(self, logits: np.ndarray, k: int) -> tuple[int, float, list[tuple[int, float]]]:
        """sample() on these logits (the batch row, as the engine left it), also
        returning the chain's probability of the token and its `k` most probable
        surviving candidates: llama-server's post-sampling probabilities. A greedy
        chain computes no probabilities: its pick has probability 1 and nothing
        else survives, as llama-server's temperature-0 chain leaves it."""
        self._finish_priming()
        token = None
        if self.narrowing is not None:
            token = self._candidates.run_narrowed(self._ptr, logits, self.narrowing)
        if token is None:
            token = self._candidates.run(self._ptr, logits)
        self.accept(token)
        if self._greedy:
            return token, 1.0, [(token, 1.0)] if k > 0 else []
        prob, top = post_sampling_probs(self._candidates.surviving(), token, k)
        return token, prob, top

    def accept(self, token: int) -> None:
        """Tell the chain about a token (one it picked, one forced into the output, one
        of the prompt)."""
        self._finish_priming()
        llama_cpp.llama_sampler_accept(self._ptr, token)
        if self.narrowing is not None:
            self.narrowing.accepted(token)

    def free(self) -> None:
        if self._ptr:
            llama_cpp.llama_sampler_free(self._ptr)
            self._ptr = None

    def __del__(self) -> None:  # a safety net; the engine frees chains explicitly
        self.free()
