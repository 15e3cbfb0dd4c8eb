"""What a slot's sequence holds when a request is admitted into it: the prefix it
already shares with the prompt, or a longer one copied from a slot that is busy with
another request, or restored from the host-RAM prompt cache, after saving there what
the slot is about to lose. Idle slots are saved ahead of time while the engine has
nothing else to do, so admissions rarely wait for that copy. With --cache-reuse N, as
llama-server's, runs of N or more tokens the slot holds past the shared prefix are
moved to where the prompt has them (a chat whose oldest turns were dropped)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from mlxcel.engine.llama_runtime import LlamaRuntime
from mlxcel.engine.lora_sets import LoraScales, cache_salt
from mlxcel.engine.prompt_cache import BLOCK_SIZE, HostPromptCache
from mlxcel.engine.slots import Slot, common_prefix_length

MIN_DONATION_BLOCKS = 2  # smaller prefixes are cheaper to prefill than to restore
MIN_GAIN = BLOCK_SIZE  # a copy or restore must save at least this many prompt tokens
MAX_CHUNK_PROBES = 4096  # --cache-reuse: most places one admission compares (each a run's worth of tokens)


class SlotMemory:
    def __init__(self, runtime: LlamaRuntime, host_cache: HostPromptCache | None, chunk_reuse: int = 0) -> None:
        """`chunk_reuse`: --cache-reuse, the shortest run moved into place (0: off)."""
        self.runtime = runtime
        self.host_cache = host_cache
        self.chunk_reuse = chunk_reuse

    def admit(self, slot: Slot, prompt: list[int], n_common: int, reuse: bool, busy: Iterable[Slot] = (),
              lora: LoraScales = (), chunks: bool = True, chunk_reuse: int | None = None) -> None:
        """Leave in the slot's sequence only a reusable prefix of `prompt`, to be run
        under the LoRA scales `lora` (`n_common` is 0 unless the slot's were the same);
        afterwards `slot.cached_tokens` is exactly what the sequence holds. `busy` are
        the slots serving other requests, whose prefixes may be copied. `chunks`: runs
        past the prefix may be moved into place (not for a prompt with media, nor where
        the memory cannot shift); `chunk_reuse`: the request's least run (None: the server's)."""
        slot.cache_tier = "slot" if n_common else "miss"
        same_scales = slot.lora == lora
        if reuse:
            n_common = self._take_longer_prefix(slot, prompt, n_common, busy, lora)
            least = self.chunk_reuse if chunk_reuse is None else chunk_reuse
            if least > 0 and chunks and same_scales:
                n_common = self._reuse_chunks(slot, prompt, n_common, least)
        slot.lora = lora
        self._cut(slot, prompt, n_common)

    def _reuse_chunks(self, slot: Slot, prompt: list[int], n_past: int, n_min: int) -> int:
        """Past the first `n_past` tokens, each run of at least `n_min` tokens the
        slot holds that the prompt has next is moved down to the prompt's position, the
        cells skipped over dropped (llama-server's --cache-reuse). The new shared prefix:
        `slot.cached_tokens` holds it, and the sequence holds it first (what is left past
        it, the caller cuts). At most MAX_CHUNK_PROBES places are compared, so a prompt
        built to match everywhere costs a bounded look, not a quadratic one."""
        held = np.asarray(slot.cached_tokens, dtype=np.int64)
        wanted = np.asarray(prompt, dtype=np.int64)
        end_p = len(prompt) - 1  # the last prompt token is always decoded again, for its logits
        head_c, head_p, probes = n_past, n_past, MAX_CHUNK_PROBES
        if len(held) < n_min:
            return n_past
        windows = np.lib.stride_tricks.sliding_window_view(held, n_min)  # a view: window i is held[i:i + n_min]
        kept = list(slot.cached_tokens[:n_past])
        while head_p + n_min <= end_p and head_c + n_min <= len(held) and probes > 0:
            hits = head_c + np.flatnonzero(held[head_c:len(held) - n_min + 1] == wanted[head_p])[:probes]
            probes -= len(hits)
            whole = np.flatnonzero((windows[hits] == wanted[head_p:head_p + n_min]).all(axis=1)) if len(hits) else hits
            if not len(whole):
                break  # no run of the prompt's next tokens further on: the rest is prefilled
            start = int(hits[whole[0]])
            span = min(len(held) - start, end_p - head_p)
            differ = np.flatnonzero(held[start:start + span] != wanted[head_p:head_p + span])
            n = int(differ[0]) if differ.size else span
            if not self.runtime.move_seq(slot.id, start, start + n, head_p):
                return self._forget(slot)
            kept += slot.cached_tokens[start:start + n]
            head_c, head_p = start + n, head_p + n
        if head_p > n_past:
            slot.cached_tokens = kept
            slot.cache_tier = "slot"
        return head_p

    def clear_idle(self, slot: Slot, slots: Iterable[Slot]) -> None:
        """In a unified KV pool, as llama-server does there: before `slot` takes a new
        request, every other idle slot is saved to the host cache and cleared. Each
        decode reads every cell in use in such a pool (4 streams decoding beside 8 idle
        sequences ran at half the speed), and the slot may need the room. A per-slot
        pool keeps idle slots as they are."""
        if not self.runtime.kv_unified:
            return
        for idle in slots:
            if idle is slot or idle.request is not None or not idle.cached_tokens:
                continue
            if idle.unsaved and self.host_cache is not None:
                self._donate(idle, keep=0)
            idle.unsaved = False
            self._forget(idle)

    def has_unsaved(self, slots: Iterable[Slot]) -> bool:
        return self._next_unsaved(slots) is not None

    def save_one_idle(self, slots: Iterable[Slot]) -> bool:
        """Save one idle slot's unsaved tokens to the host cache, so that a later
        admission finds them saved and copies nothing first; False when none is left."""
        slot = self._next_unsaved(slots)
        if slot is None:
            return False
        slot.unsaved = False
        self._donate(slot, keep=0)
        return True

    def _next_unsaved(self, slots: Iterable[Slot]) -> Slot | None:
        if self.host_cache is None:
            return None
        return next((s for s in slots if s.unsaved and s.request is None), None)

    def _take_longer_prefix(self, slot: Slot, prompt: list[int], n_common: int, busy: Iterable[Slot],
                            lora: LoraScales) -> int:
        if slot.unsaved and self.host_cache is not None:
            self._donate(slot, keep=n_common)  # what is past the shared prefix is about to go
        slot.unsaved = False
        slot.lora = lora  # from here on it holds the shared prefix, or what is copied or restored
        source, n_live = self._longest_live_prefix(prompt, (other for other in busy if other.lora == lora))
        found = self.host_cache.lookup(prompt, cache_salt(lora)) if self.host_cache is not None else None
        n_cached = found[1] if found is not None else 0
        if max(n_live, n_cached) < n_common + MIN_GAIN:
            return n_common
        if n_live >= n_cached:
            return self._copy_live(slot, source, prompt, n_live)
        return self._restore(slot, found[0], prompt)

    @staticmethod
    def _longest_live_prefix(prompt: list[int], busy: Iterable[Slot]) -> tuple[Slot | None, int]:
        """The busy slot sharing the longest prefix with `prompt`. A request that opted
        out of prompt caching, or whose context was shifted, shares nothing."""
        best, n_best = None, 0
        for other in busy:
            if other.request is None or not other.request.cache_prompt or other.shifted_keep is not None:
                continue  # a shifted sequence's memory no longer matches its tokens
            n = common_prefix_length(other.cached_tokens, prompt)
            if n > n_best:
                best, n_best = other, n
        return best, n_best

    def _copy_live(self, slot: Slot, source: Slot, prompt: list[int], n_live: int) -> int:
        n_shared = min(n_live, len(prompt) - 1)
        self.runtime.copy_seq(source.id, slot.id)
        if not self.runtime.seq_remove(slot.id, n_shared, -1):
            return self._forget(slot)
        slot.cached_tokens = source.cached_tokens[:n_shared]
        slot.cache_tier = "slot"
        return n_shared

    def _restore(self, slot: Slot, entry, prompt: list[int]) -> int:
        n_shared = min(common_prefix_length(entry.tokens, prompt), len(prompt) - 1)
        self.runtime.seq_clear(slot.id)
        restored = self.runtime.restore_seq_state(slot.id, entry.state)
        if not restored or (n_shared < len(entry.tokens) and not self.runtime.seq_remove(slot.id, n_shared, -1)):
            return self._forget(slot)
        slot.cached_tokens = entry.tokens[:n_shared]
        slot.cache_tier = "exact" if n_shared >= len(prompt) // BLOCK_SIZE * BLOCK_SIZE else "block"
        return n_shared

    def _forget(self, slot: Slot) -> int:
        """Empty the slot's sequence (a copy or restore failed); 0 tokens kept."""
        self.runtime.seq_clear(slot.id)
        slot.cached_tokens.clear()
        return 0

    def _donate(self, slot: Slot, keep: int) -> None:
        """Before a slot's tokens past `keep` are overwritten, save its sequence to
        the host cache (unless an entry for the same blocks is there already)."""
        tokens = slot.cached_tokens
        if len(tokens) <= keep + BLOCK_SIZE or len(tokens) < MIN_DONATION_BLOCKS * BLOCK_SIZE:
            return
        # An entry holding all but a few blocks of it: those are cheaper to prefill than
        # the whole state is to copy. Past that, saving wins by far, however long the
        # sequence: a conversation's turn adds ~150 tokens to a 2,400-token history,
        # whose state (55 MB) copies in ~20 ms where prefilling them again took ~1 s on
        # a 2-core CPU; the new entry supersedes the older one, so memory does not grow.
        salt = cache_salt(slot.lora)
        if len(tokens) - self.host_cache.covered(tokens, salt) < MIN_DONATION_BLOCKS * BLOCK_SIZE:
            return
        self.host_cache.insert(list(tokens), self.runtime.seq_state(slot.id), made_at=slot.last_used, salt=salt)

    def cut(self, slot: Slot, n_keep: int) -> None:
        """Keep only the first `n_keep` positions of the slot's sequence."""
        if n_keep >= slot.n_past:
            return
        if n_keep <= 0 or not self.runtime.seq_remove(slot.id, n_keep, -1):
            self.runtime.seq_clear(slot.id)
            n_keep = 0
        del slot.cached_tokens[n_keep:]

    def _cut(self, slot: Slot, prompt: list[int], n_keep: int) -> None:
        """Cut the sequence back to the reusable prefix (at least one prompt token is
        always decoded again so its logits exist)."""
        n_keep = min(n_keep, len(prompt) - 1)
        if n_keep <= 0 or not self.runtime.seq_remove(slot.id, n_keep, -1):
            self.runtime.seq_clear(slot.id)
            n_keep = 0
        del slot.cached_tokens[n_keep:]
