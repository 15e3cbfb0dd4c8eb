"""A fake llama runtime, tokenizer and sampler, to drive the Engine without a model.

`FakeRuntime` is the part of LlamaRuntime that Engine and SlotMemory use. It reads
every batch it is asked to decode from the llama_batch struct itself, as llama.cpp
would, checks that each sequence's positions continue where its memory ends, and
keeps each sequence's memory (its tokens by position), which seq_remove, seq_clear,
copy_seq, seq_state and restore_seq_state edit. It is its own `ctx`: the samplers
read the last decoded batch through it.

Its "model" is a deterministic function of a sequence's history: `FakeSampler` reads
the sequence's tokens up to the row it samples at, so a request's output depends on
everything its sequence holds, and an engine that loses or mangles memory (a bad
rewind, a wrong prefix cut) produces tokens other than `expected_tokens` says.

Anything the fakes find wrong is appended to `FakeRuntime.violations`, which a test
fixture asserts is empty.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from mlxcel.engine import held_wakeups
from mlxcel.engine.request import FinishEvent, TokenEvent
from mlxcel.engine.sampling import SamplingParams

N_VOCAB = 1000
EOG = 999  # the fake vocabulary's only end-of-generation token
HOLD_TIMEOUT_S = 5.0  # a held decode waits this long for a test to let it through

Model = Callable[[list[int]], int]


GAP = -1  # a position move_seq left empty


def successor(history: list[int]) -> int:
    """The next token is the last one plus one: a prompt ending in 10 yields 11, 12, ..."""
    return (history[-1] + 1) % N_VOCAB


def history_hash(history: list[int]) -> int:
    """The next token depends on every token the sequence holds and its position
    (never the end-of-generation token)."""
    return 100 + sum((i + 1) * t for i, t in enumerate(history)) % 800


def expected_tokens(model: Model, prompt: list[int], n: int) -> list[int]:
    """What a request with `prompt` generates in `n` tokens when its sequence's memory is right."""
    history, out = list(prompt), []
    for _ in range(n):
        out.append(model(history))
        history.append(out[-1])
    return out


@dataclass
class DecodedBatch:
    """One llama_batch as the fake runtime read it."""

    tokens: list[int]
    positions: list[int]
    seq_ids: list[int]
    logits: list[bool]
    histories: dict[int, list[int]]  # each sequence in the batch: its tokens once the batch is in memory
    rc: int = 0

    @property
    def seqs(self) -> set[int]:
        return set(self.seq_ids)

    def tokens_of(self, seq: int) -> list[int]:
        return [t for t, s in zip(self.tokens, self.seq_ids) if s == seq]

    def positions_of(self, seq: int) -> list[int]:
        return [p for p, s in zip(self.positions, self.seq_ids) if s == seq]

    def holds_prompt(self, seq: int, first_token: int) -> bool:
        """Whether the batch holds tokens of `seq` whose sequence starts with `first_token`."""
        return seq in self.histories and self.histories[seq][:1] == [first_token]


@dataclass(frozen=True)
class FakeRuntimeConfig:
    n_parallel: int


class FakeRuntime:
    def __init__(self, n_parallel: int = 2, n_batch: int = 64, n_ctx_seq: int = 256, model: Model = successor,
                 kv_unified: bool = False):
        self.config = FakeRuntimeConfig(n_parallel)
        self.n_batch = n_batch
        self.n_ubatch = n_batch  # llama.cpp caps n_ubatch at n_batch
        self.n_ctx_seq = n_ctx_seq
        self.kv_unified = kv_unified  # then n_ctx_seq is the whole pool, as llama.cpp gives it
        self.n_ctx = n_ctx_seq if kv_unified else n_ctx_seq * n_parallel
        self.vocab = object()  # opaque: only handed to the sampler factory
        self.model = model
        self.loras: list = []  # no LoRA adapters
        self.can_shift = True  # positions can be moved (context shift, --cache-reuse)
        self.memory: dict[int, list[int]] = {seq: [] for seq in range(n_parallel)}
        self.batches: list[DecodedBatch] = []  # every batch decode was asked for, refused ones too
        self.last: DecodedBatch | None = None  # the last batch decoded successfully
        self.violations: list[str] = []
        self.shifts: list[tuple[int, int, int]] = []  # every context shift: (sequence, n_keep, n_discard)
        # the rc to answer for a batch (None: 0); may raise, as a broken runtime would
        self.refuse: Callable[[DecodedBatch], int] | None = None
        self.arrivals: queue.Queue[DecodedBatch] = queue.Queue()  # batches held, see hold()
        self._held = False
        self._permits = threading.Semaphore(0)
        self.on_decode: Callable[[], None] | None = None  # called as each decode starts

    @property
    def ctx(self) -> FakeRuntime:
        return self

    # -- holding decodes, so a test can act while the engine sits in one ---------------

    def hold(self) -> None:
        """From now on every decode waits, after posting its batch to `arrivals`,
        until `allow` lets it through."""
        self._held = True

    def next_held(self, timeout: float = 5.0) -> DecodedBatch:
        return self.arrivals.get(timeout=timeout)

    def allow(self, n: int = 1) -> None:
        self._permits.release(n)

    def release(self) -> None:
        """Stop holding, and let through a decode waiting now."""
        self._held = False
        self._permits.release(1)

    # -- what the engine calls -----------------------------------------------------

    def decode(self, batch) -> int:
        if self.on_decode is not None:
            self.on_decode()
        held_wakeups.release()  # as LlamaRuntime.decode: the held wake-ups go out before the GIL does
        record = self._read(batch)
        self.batches.append(record)
        if not record.tokens:
            return -1  # as llama_decode answers an empty batch
        if self._held:
            self.arrivals.put(record)
            if not self._permits.acquire(timeout=HOLD_TIMEOUT_S):
                raise TimeoutError("a held decode was never allowed through")
        record.rc = self.refuse(record) if self.refuse is not None else 0
        # even a refused batch is written: llama.cpp may keep part of one, the engine must cut it
        for seq, history in record.histories.items():
            self.memory[seq] = list(history)
        if record.rc == 0:
            self.last = record
        return record.rc

    def seq_remove(self, seq_id: int, start: int, end: int = -1) -> bool:
        memory = self.memory[seq_id]
        if 0 <= end < len(memory):
            self.violations.append(f"seq_remove({seq_id}, {start}, {end}) would leave a hole")
            return False
        del memory[max(start, 0):]
        return True

    def shift_seq(self, seq_id: int, n_keep: int, n_discard: int) -> bool:
        memory = self.memory[seq_id]
        if not 0 <= n_keep <= n_keep + n_discard <= len(memory):
            self.violations.append(f"shift_seq({seq_id}, {n_keep}, {n_discard}) outside {len(memory)} positions")
            return False
        del memory[n_keep : n_keep + n_discard]
        self.shifts.append((seq_id, n_keep, n_discard))
        return True

    def move_seq(self, seq_id: int, start: int, end: int, to: int) -> bool:
        """As llama.cpp's seq_rm [to, start) then seq_add [start, end) by to - start: the
        cells past `end` keep their positions (GAP fills the room left behind)."""
        memory = self.memory[seq_id]
        if not 0 <= to <= start <= end <= len(memory):
            self.violations.append(f"move_seq({seq_id}, {start}, {end}, {to}) outside {len(memory)} positions")
            return False
        self.memory[seq_id] = memory[:to] + memory[start:end] + [GAP] * (start - to) + memory[end:]
        return True

    def seq_clear(self, seq_id: int) -> None:
        self.memory[seq_id] = []

    def seq_state(self, seq_id: int) -> np.ndarray:
        return np.array(self.memory[seq_id], dtype=np.int32)

    def restore_seq_state(self, seq_id: int, state: np.ndarray) -> bool:
        self.memory[seq_id] = [int(t) for t in state]
        return True

    def copy_seq(self, src: int, dst: int) -> None:
        self.memory[dst] = list(self.memory[src])

    def _read(self, batch) -> DecodedBatch:
        """Read the llama_batch struct and check it as llama.cpp would."""
        n = batch.n_tokens
        if not 0 < n <= self.n_batch:
            self.violations.append(f"a batch of {n} tokens (n_batch {self.n_batch})")
        tokens = [batch.token[i] for i in range(n)]
        positions = [batch.pos[i] for i in range(n)]
        seq_ids = [batch.seq_id[i][0] for i in range(n)]
        logits = [bool(batch.logits[i]) for i in range(n)]
        if any(batch.n_seq_id[i] != 1 for i in range(n)):
            self.violations.append("a token in several sequences")
        histories: dict[int, list[int]] = {}
        for token, position, seq in zip(tokens, positions, seq_ids):
            if seq not in self.memory:
                self.violations.append(f"sequence {seq} out of range")
                continue
            history = histories.setdefault(seq, list(self.memory[seq]))
            if position != len(history):
                self.violations.append(f"sequence {seq}: token at position {position}, memory ends at {len(history)}")
            if position >= self.n_ctx_seq:
                self.violations.append(f"sequence {seq}: position {position} past n_ctx_seq {self.n_ctx_seq}")
            history.append(token)
        return DecodedBatch(tokens, positions, seq_ids, logits, histories)


class FakeTokenizer:
    """Token t reads "<t>", unless `pieces` says otherwise."""

    def __init__(self, pieces: dict[int, bytes] | None = None, eog_tokens: frozenset[int] = frozenset({EOG})):
        self.n_vocab = N_VOCAB
        self.add_bos = False
        self.eog_tokens = eog_tokens
        self.render_special = False  # -sp: the end token's text is not output
        self._pieces = pieces or {}

    def is_eog(self, token: int) -> bool:
        return token in self.eog_tokens

    def piece(self, token: int) -> bytes:
        return self._pieces.get(token, f"<{token}>".encode())


class SamplerFault(RuntimeError):
    pass


class FakeSampler:
    """Samples what the runtime's model says for the sequence's history at the row."""

    def __init__(self, runtime: FakeRuntime, params: SamplingParams, banned: frozenset[int],
                 fail_when: Callable[[list[int]], bool] | None) -> None:
        self.runtime = runtime
        self.seed = params.seed
        self.banned = banned
        self.fail_when = fail_when
        self.accepted: list[int] = []
        self.unprimed: list[int] = []  # prompt tokens noted by prime(), not accepted yet
        self.primed: list[int] = []  # the prompt tokens the chain's history took so far
        self.prime_shares: list[int] = []  # how many each prime_some call took
        self.sampled_unprimed = 0  # draws that had to finish the priming first
        self.freed = 0

    def sample(self, ctx: FakeRuntime, batch_index: int) -> int:
        if self.unprimed:  # as SamplerChain: the rest of the prompt first
            self.sampled_unprimed += 1
            self.prime_some(len(self.unprimed))
        batch = ctx.last
        if batch is None or not 0 <= batch_index < len(batch.tokens) or not batch.logits[batch_index]:
            ctx.violations.append(f"sampled at row {batch_index}, which has no logits")
            raise AssertionError("sampled a row without logits")
        seq, position = batch.seq_ids[batch_index], batch.positions[batch_index]
        history = batch.histories[seq][: position + 1]
        if self.fail_when is not None and self.fail_when(history):
            raise SamplerFault("the fake sampler was told to fail here")
        token = ctx.model(history)
        while token in self.banned:
            token = (token + 1) % N_VOCAB
        return token

    def prime(self, prompt: list[int]) -> None:
        self.unprimed = list(prompt)

    @property
    def priming(self) -> bool:
        return bool(self.unprimed)

    def prime_some(self, limit: int) -> None:
        self.prime_shares.append(min(limit, len(self.unprimed)))
        self.primed += self.unprimed[:limit]
        del self.unprimed[:limit]

    def accept(self, token: int) -> None:
        self.accepted.append(token)

    def free(self) -> None:
        self.freed += 1


@dataclass
class SamplerCall:
    params: SamplingParams
    n_vocab: int
    context_size: int
    banned_tokens: frozenset[int]


@dataclass
class FakeSamplerFactory:
    """Passed as EngineConfig(sampler=...): builds a FakeSampler with SamplerChain's arguments."""

    runtime: FakeRuntime
    fail_when: Callable[[list[int]], bool] | None = None  # the samplers raise at these histories
    refuse: Callable[[SamplingParams], bool] | None = None  # building a sampler raises for these
    calls: list[SamplerCall] = field(default_factory=list)
    made: list[FakeSampler] = field(default_factory=list)

    def __call__(self, params: SamplingParams, vocab, n_vocab: int, context_size: int,
                 banned_tokens: frozenset[int] = frozenset()) -> FakeSampler:
        if vocab is not self.runtime.vocab:
            self.runtime.violations.append("the sampler was built over another vocabulary")
        self.calls.append(SamplerCall(params, n_vocab, context_size, banned_tokens))
        if self.refuse is not None and self.refuse(params):
            raise SamplerFault("the fake sampler factory was told to fail")
        sampler = FakeSampler(self.runtime, params, banned_tokens, self.fail_when)
        self.made.append(sampler)
        return sampler


class RequestEvents:
    """A request's `emit`: collects what the engine sends from its thread, for a
    test to wait on with a timeout."""

    def __init__(self, label: str = "", order: list[str] | None = None) -> None:
        self.label = label
        self.order = order  # labels appended as requests finish, shared between requests
        self.request = None  # the GenerationRequest, once built
        self._queue: queue.Queue = queue.Queue()
        self.tokens: list[TokenEvent] = []
        self.finish: FinishEvent | None = None
        self.n_finish = 0
        self.late: list = []  # events after the FinishEvent (there must be none)

    def __call__(self, event) -> None:
        if self.n_finish:
            self.late.append(event)
        if isinstance(event, FinishEvent):
            self.n_finish += 1
            if self.order is not None:
                self.order.append(self.label)
        self._queue.put(event)

    def wait(self, timeout: float = 5.0) -> FinishEvent:
        """Every event up to the FinishEvent, which is returned."""
        while self.finish is None:
            try:
                event = self._queue.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no FinishEvent within {timeout}s ({len(self.tokens)} tokens came)") from None
            if isinstance(event, FinishEvent):
                self.finish = event
            else:
                self.tokens.append(event)
        return self.finish

    @property
    def token_ids(self) -> list[int]:
        return [e.token for e in self.tokens]

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.tokens) + (self.finish.text if self.finish else "")
