"""What a slot's sequence holds when a request is admitted into it: the prefix it
already shares with the prompt, or a longer one restored from the host-RAM prompt
cache, after saving there what the slot is about to lose."""

from __future__ import annotations

from mlxcel.engine.llama_runtime import LlamaRuntime
from mlxcel.engine.prompt_cache import BLOCK_SIZE, HostPromptCache
from mlxcel.engine.slots import Slot, common_prefix_length

MIN_DONATION_BLOCKS = 2  # smaller prefixes are cheaper to prefill than to restore


class SlotMemory:
    def __init__(self, runtime: LlamaRuntime, host_cache: HostPromptCache | None) -> None:
        self.runtime = runtime
        self.host_cache = host_cache

    def admit(self, slot: Slot, prompt: list[int], n_common: int, reuse: bool) -> None:
        """Leave in the slot's sequence only a reusable prefix of `prompt`; afterwards
        `slot.cached_tokens` is exactly what the sequence holds."""
        slot.cache_tier = "slot" if n_common else "miss"
        if reuse and self.host_cache is not None:
            n_common = self._restore_longer_prefix(slot, prompt, n_common)
        self._cut(slot, prompt, n_common)

    def _restore_longer_prefix(self, slot: Slot, prompt: list[int], n_common: int) -> int:
        self._donate(slot, keep=n_common)
        found = self.host_cache.lookup(prompt)
        if found is None or found[1] <= n_common + BLOCK_SIZE // 2:
            return n_common
        entry, _ = found
        n_shared = min(common_prefix_length(entry.tokens, prompt), len(prompt) - 1)
        self.runtime.seq_clear(slot.id)
        restored = self.runtime.restore_seq_state(slot.id, entry.state)
        if not restored or (n_shared < len(entry.tokens) and not self.runtime.seq_remove(slot.id, n_shared, -1)):
            self.runtime.seq_clear(slot.id)
            slot.cached_tokens.clear()
            return 0
        slot.cached_tokens = entry.tokens[:n_shared]
        slot.cache_tier = "exact" if n_shared >= len(prompt) // BLOCK_SIZE * BLOCK_SIZE else "block"
        return n_shared

    def _donate(self, slot: Slot, keep: int) -> None:
        """Before a slot's tokens past `keep` are overwritten, save its sequence to
        the host cache (unless an entry for the same blocks is there already)."""
        tokens = slot.cached_tokens
        if len(tokens) <= keep + BLOCK_SIZE or len(tokens) < MIN_DONATION_BLOCKS * BLOCK_SIZE:
            return
        if self.host_cache.contains(tokens):
            return
        self.host_cache.insert(list(tokens), self.runtime.seq_state(slot.id))

    def _cut(self, slot: Slot, prompt: list[int], n_keep: int) -> None:
        """Cut the sequence back to the reusable prefix (at least one prompt token is
        always decoded again so its logits exist)."""
        n_keep = min(n_keep, len(prompt) - 1)
        if n_keep <= 0 or not self.runtime.seq_remove(slot.id, n_keep, -1):
            self.runtime.seq_clear(slot.id)
            n_keep = 0
        del slot.cached_tokens[n_keep:]
