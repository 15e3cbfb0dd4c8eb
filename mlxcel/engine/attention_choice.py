"""`-fa auto` on a CPU, decided by measurement.

llama.cpp's auto turns flash attention on wherever the backend has the operation, the
CPU included. On a CPU its kernel can be the slower one: on a 2-core AMD EPYC (Zen 3)
SmolLM2-135M decoded 1.4-1.7x faster without it at 1,500-3,000 tokens of context
(prefill the same), and on Arm Neoverse V cores it halves prefill (llama.cpp issue
27086); elsewhere it wins. So when every layer runs on the CPU, auto times both
kernels on the loaded model in two small side contexts (a prefill, then single-token
decodes near the start and at depth) and keeps the cheaper for a typical request: 512
new prompt tokens (the rest cached) and a 128-token reply at half a slot's context,
plain attention's steps counted at what they cost when served, unless plain attention
is dearer near the start of a context. A quantized V cache needs flash attention: then
nothing is measured. Nor is it where plain attention's scores could take a large share
of the machine's memory (a big model, a long slot): flash attention streams them.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import llama_cpp

from mlxcel.engine.batch import TokenBatch
from mlxcel.engine.compute_gate import COMPUTE_GATE
from mlxcel.engine.core_share import uncontended
from mlxcel.engine.cost_cache import load_json, save_json

PROBE_DEPTH = 768  # prompt tokens the probe prefills before it times decodes at depth
PROBE_STEPS = 12  # single-token decodes timed at each depth (their median counts)
# the request the choice is made for: this many new prompt tokens (the rest of its
# context cached, as a conversation's turns are) and reply tokens at a typical depth
TYPICAL_PROMPT = 512
TYPICAL_REPLY = 128
MIN_GAIN = 0.05  # plain attention must be this much cheaper to be chosen over llama.cpp's own
# ...and may cost at most this much more near the start of a context: plain attention's
# graph has more nodes per layer, which on a tiny model outweighs the kernel (SmolLM2-135M
# on the Zen 3: 11.9 ms a step against 8.0 near the start, cheaper past ~500 tokens;
# Qwen2.5-0.5B: 29.3 against 28.5), and short chats must not pay for long ones
MAX_SHALLOW_LOSS = 0.05
# Served, plain attention's decode steps cost more than the probe times them: its graph's
# extra nodes are extra thread barriers, and a server's HTTP side and its clients pre-empt
# the compute threads between them. Qwen2.5-0.5B on the Zen 3, -c 8192 -np 4: the probe
# put plain 2.7 % dearer a step near the start, bench/run.py's one-stream decode 15 %
# (27.6 against 31.7 tokens/s, consecutive runs). So its steps count this much more.
PLAIN_SERVED_STEP_PENALTY = 0.12
FLASH_NEEDED = {"f16", "f32", "bf16"}  # V cache types that work without flash attention
# Plain attention holds one micro-batch's scores against a whole slot's keys, per query
# head, in f32, twice (the scores and their softmax), where flash attention streams them:
# Qwen2.5-0.5B (14 heads) at 16,384 tokens and -ub 512 needs 0.9 GiB of it, a 7-8B model
# (32 heads) at 32,768 tokens 4 GiB, touched only when a prompt that long arrives. Auto
# takes plain attention for speed only while that stays under this share of the memory.
MAX_PLAIN_SCORES_SHARE = 1 / 8


@dataclass(frozen=True)
class KernelTimes:
    """One attention kernel's timings on the model: prefill seconds per prompt token
    (over PROBE_DEPTH tokens), and a single-token decode step near the start and at
    PROBE_DEPTH tokens of context."""

    prefill_per_token: float
    step_shallow: float
    step_deep: float
    depth: int = PROBE_DEPTH

    def step_at(self, depth: int) -> float:
        """A decode step at `depth` tokens of context: linear in depth between the two
        measured steps (attention reads every cached position), never below the shallow one."""
        slope = max(0.0, (self.step_deep - self.step_shallow) / max(1, self.depth))
        return self.step_shallow + slope * depth

    def request_cost(self, depth: int, prompt: int = TYPICAL_PROMPT, reply: int = TYPICAL_REPLY,
                     step_factor: float = 1.0) -> float:
        """Seconds for a request that prefills `prompt` new tokens and decodes `reply`
        tokens at about `depth` tokens of context (each step `step_factor` times its timing)."""
        return self.prefill_per_token * prompt + reply * self.step_at(depth) * step_factor

    def to_dict(self) -> dict:
        return {"prefill_per_token": self.prefill_per_token, "step_shallow": self.step_shallow,
                "step_deep": self.step_deep, "depth": self.depth}

    @classmethod
    def from_dict(cls, raw: dict) -> KernelTimes:
        times = cls(float(raw["prefill_per_token"]), float(raw["step_shallow"]), float(raw["step_deep"]),
                    int(raw.get("depth", PROBE_DEPTH)))
        if min(times.prefill_per_token, times.step_shallow, times.step_deep) <= 0:
            raise ValueError("a kernel's timings must be positive")
        return times


def typical_depth(n_ctx_seq: int) -> int:
    """The context depth a choice is made for: half a slot's context, within 512..8192."""
    return max(512, min(8192, n_ctx_seq // 2))


def served_plain_cost(plain: KernelTimes, depth: int) -> float:
    return plain.request_cost(depth, step_factor=1.0 + PLAIN_SERVED_STEP_PENALTY)


def choose(flash: KernelTimes, plain: KernelTimes, depth: int) -> bool:
    """Whether flash attention is kept: unless plain attention, its steps as served, is
    MIN_GAIN cheaper for a typical request at `depth` and at most MAX_SHALLOW_LOSS dearer
    a step near the start (flash is llama.cpp's own choice, so a tie keeps it)."""
    if plain.step_at(0) > (1.0 + MAX_SHALLOW_LOSS) * flash.step_at(0):
        return True
    return served_plain_cost(plain, depth) > (1.0 - MIN_GAIN) * flash.request_cost(depth)


def plain_scores_bytes(n_ubatch: int, n_ctx_seq: int, n_head: int) -> int:
    """Plain attention's scratch for the scores at its largest: a full micro-batch of
    queries against a full slot's keys, every head, f32, the scores and their softmax."""
    return 2 * 4 * n_ubatch * n_ctx_seq * n_head


def probe_needed(n_gpu_layers: int, type_v: str) -> bool:
    """Whether auto is ours to decide: every layer on the CPU (no GPU backend, or -ngl 0)
    and a V cache type that plain attention can read."""
    on_cpu = n_gpu_layers == 0 or not llama_cpp.llama_supports_gpu_offload()
    return on_cpu and type_v in FLASH_NEEDED


def time_kernel(model, base_params, flash: bool, threads: int) -> KernelTimes:
    """Time one kernel in a side context of PROBE_DEPTH + PROBE_STEPS + a little positions
    (the model's other contexts untouched; other engines wait meanwhile)."""
    params = type(base_params).from_buffer_copy(base_params)  # the caller's stay as they are
    params.n_ctx = PROBE_DEPTH + 2 * PROBE_STEPS + 64
    params.n_seq_max = 1
    params.kv_unified = True
    params.n_batch = params.n_ubatch = min(int(base_params.n_ubatch), PROBE_DEPTH)
    params.flash_attn_type = (llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash
                              else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED)
    ctx = llama_cpp.llama_init_from_model(model, params)
    if not ctx:
        raise RuntimeError(f"could not create a context to time {'flash' if flash else 'plain'} attention")
    try:
        with COMPUTE_GATE.hold(guest=True):
            return _time(ctx, model, int(params.n_batch), threads)
    finally:
        llama_cpp.llama_free(ctx)


def _time(ctx, model, n_batch: int, threads: int) -> KernelTimes:
    vocab = llama_cpp.llama_model_get_vocab(model)
    filler = llama_cpp.llama_vocab_n_tokens(vocab) // 3
    batch = TokenBatch(n_batch)

    def decode_at(position: int) -> float:
        batch.clear()
        batch.add(filler + position % 97, position, 0, True)
        started = time.perf_counter()
        if llama_cpp.llama_decode(ctx, batch.seal()) != 0:
            raise RuntimeError("llama_decode failed while timing attention")
        return time.perf_counter() - started

    def steps(start: int) -> float:
        return statistics.median(decode_at(start + i) for i in range(PROBE_STEPS))

    with uncontended(threads, "attention was timed"):
        decode_at(0)  # lazy set-up, not timed
        shallow = steps(1)
        llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(ctx), 0, -1, -1)
        started = time.perf_counter()
        for start in range(0, PROBE_DEPTH, n_batch):
            batch.clear()
            n = min(n_batch, PROBE_DEPTH - start)
            batch.add_span([filler + (start + i) % 97 for i in range(n)], start, 0, logits_last=True)
            if llama_cpp.llama_decode(ctx, batch.seal()) != 0:
                raise RuntimeError("llama_decode failed while timing attention")
        prefill = (time.perf_counter() - started) / PROBE_DEPTH
        deep = steps(PROBE_DEPTH)
    return KernelTimes(prefill, shallow, deep)


def decide(model, params, cache_path: Path, depth: int, threads: int, scores_bytes: int = 0,
           memory_bytes: int = 0) -> tuple[int, str]:
    """The llama_flash_attn_type for auto, and why: flash attention, unmeasured, where
    plain attention's `scores_bytes` pass MAX_PLAIN_SCORES_SHARE of `memory_bytes` (0:
    unknown); else the kernels' timings read back from `cache_path` (the same model and
    settings timed before) or measured and saved there; llama.cpp's own auto when they
    cannot be measured (then measured at the next start)."""
    if memory_bytes > 0 and scores_bytes > MAX_PLAIN_SCORES_SHARE * memory_bytes:
        return llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED, (
            f"on (without it, one micro-batch's attention scores over a full slot would take "
            f"{scores_bytes / 2**20:.0f} MiB, more than 1/{round(1 / MAX_PLAIN_SCORES_SHARE)} of "
            f"the {memory_bytes / 2**20:.0f} MiB of memory; not timed)")
    saved = load_json(cache_path)
    try:
        flash, plain = KernelTimes.from_dict(saved["flash"]), KernelTimes.from_dict(saved["plain"])
        source = "timed at an earlier start"
    except (TypeError, KeyError, ValueError):
        try:
            flash, plain = (time_kernel(model, params, True, threads), time_kernel(model, params, False, threads))
        except RuntimeError as exc:  # core_share.Contended included: neither used nor kept
            return llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO, f"llama.cpp's auto ({exc})"
        save_json(cache_path, {"flash": flash.to_dict(), "plain": plain.to_dict()}, "attention timings")
        source = "timed now"
    keep = choose(flash, plain, depth)
    why = (f"{'on' if keep else 'off'} ({source}: {TYPICAL_PROMPT} new prompt tokens and a {TYPICAL_REPLY}-token "
           f"reply at {depth} tokens of context, {flash.request_cost(depth):.2f} s with flash attention, "
           f"{served_plain_cost(plain, depth):.2f} s without, as served)")
    return (llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if keep else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED), why
