"""Drafts from the server's own traffic: what earlier requests generated.

Prompt lookup drafts only from the request's own prompt and output. A server sees
the same model answer many requests, and the answers repeat across them: an agent's
tool calls and their JSON, boilerplate code, a model's stock phrases, a greedy
reply that a similar prompt got before. This index holds the most recent outputs
(with the few prompt tokens before each, so an output's first tokens are keyed
too) in a ring of `capacity` tokens, and maps each n-gram to the places after its
latest occurrences. A draft copies what followed the one of those whose preceding
text matches the history's tail furthest back: a model counting "1. 2. 3." drafts
" 4." from where an earlier answer had "2. 3. 4.", not from its latest " 13.".

What it proposes is verified like any draft, so each token is the model's pick; the engine's
acceptance statistics decide per slot whether drafting it pays, in classes of their
own by how far back the match goes: a history that matches an earlier output 16
tokens back is a model writing again what it wrote before. A request that brings
a predicted output drafts from that instead (draft_choice).

Only requests that reuse the server's state (`cache_prompt`, the default) draft from
it or add to it. A verify batch computes a token's logits in other kernels than a
single decode, which may differ in the last bits (README), so a near tie may go
the other way: like a prompt-cache hit, drafts from other requests make a greedy
reply depend on what the server saw before. A request with `cache_prompt: false`
gets what a cold server gives, and donates nothing, as to the prompt cache.

Memory is bounded: the ring, one key per held position, and a dict that never holds
more entries than the ring holds positions (an overwritten position's entry goes
with it): ~150 bytes a token held at most. It belongs to the engine thread.

Like a shared prompt cache, it lets a client tell by speed whether the server wrote
a text before; a server shared by clients who must not learn that of each other
runs with `--spec-ngram-traffic 0`.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

from mlxcel.engine.prompt_lookup import CANDIDATES, MATCH_CLASSES, NO_PROPOSAL, TRAFFIC, Proposal, match_class

SEPARATOR = -1  # between two sequences in the ring: no n-gram or draft crosses it


class TrafficNgrams:
    """The latest `capacity` tokens of finished outputs, indexed by their `ngram`-grams."""

    def __init__(self, capacity: int, ngram: int) -> None:
        self.capacity = max(capacity, 16)
        self.ngram = max(1, ngram)
        self._ring = array("i", [SEPARATOR]) * self.capacity
        self._keys = array("q", [0]) * self.capacity  # the key indexed for the token at each place
        self._end = 0  # tokens ever written (absolute position of the next one)
        # n-gram key -> absolute positions of the tokens after its latest occurrences, oldest first
        self._followers: dict[int, list[int]] = {}
        self.sequences = 0  # sequences added

    def __len__(self) -> int:
        """Positions indexed (at most the ring's)."""
        return sum(len(found) for found in self._followers.values())

    def add(self, tokens: Sequence[int]) -> None:
        """Hold `tokens` (a sequence's output with up to `ngram` tokens before it) as
        one sequence: at most a quarter of the ring, its tail when longer."""
        tokens = tokens[-(self.capacity // 4):]
        n = self.ngram
        if len(tokens) <= n:
            return
        for p, token in enumerate(tokens):
            key = hash(tuple(tokens[p - n : p])) if p >= n else None
            self._write(token, key)
        self._write(SEPARATOR, None)
        self.sequences += 1

    def _write(self, token: int, key: int | None) -> None:
        at = self._end
        place = at % self.capacity
        if at >= self.capacity:  # the position overwritten takes its index entry along
            old = self._keys[place]
            found = self._followers.get(old)
            if found and found[0] == at - self.capacity:  # the oldest held, if still listed
                del found[0]
                if not found:
                    del self._followers[old]
        self._ring[place] = token
        self._keys[place] = key if key is not None else 0
        if key is not None:
            found = self._followers.get(key)
            if found is None:
                self._followers[key] = [at]
            else:
                found.append(at)
                if len(found) > 2 * CANDIDATES:  # only the latest are compared
                    del found[:CANDIDATES]
        self._end = at + 1

    def draft(self, history: list[int], limit: int, min_draft: int = 1) -> Proposal:
        """Up to `limit` tokens that followed the history's last n tokens where the
        traffic last had them, and how far back the match goes (at most the longest
        match class's length: all a draft's class needs)."""
        n = self.ngram
        if limit < min_draft or len(history) < n:
            return NO_PROPOSAL
        found = self._followers.get(hash(tuple(history[-n:])))
        if not found:
            return NO_PROPOSAL
        at, match = self._longest(found, history)
        if at < 0:
            return NO_PROPOSAL
        tokens = self._copy(at, limit)
        if len(tokens) < min_draft:
            return NO_PROPOSAL
        return Proposal(tokens, match, TRAFFIC + match_class(match))

    def _copy(self, at: int, limit: int) -> list[int]:
        """Up to `limit` tokens from absolute position `at`, to the end of its sequence."""
        stop = min(at + limit, self._end)
        first, last = at % self.capacity, (stop - 1) % self.capacity + 1
        if first < last:
            tokens = self._ring[first:last].tolist()
        else:  # it wraps round the ring's end
            tokens = self._ring[first:].tolist() + self._ring[:last].tolist()
        if SEPARATOR in tokens:
            del tokens[tokens.index(SEPARATOR):]
        return tokens

    def _longest(self, found: list[int], history: list[int]) -> tuple[int, int]:
        """Of the latest CANDIDATES places in `found` (each after an n-gram whose key is
        the history's tail's), the one whose preceding tokens match the history's tail
        furthest back (at most as far as the longest match class needs), and how far:
        (-1, 0) when none is still held or the n-gram there is not the tail's (a hash
        collision). Most places differ already in the token before the n-gram, so each
        costs one comparison; the first to match as far back as the longest class ends
        the search (an output held many times over would otherwise be compared in full
        as often)."""
        ring, capacity, n = self._ring, self.capacity, self.ngram
        oldest = self._end - capacity
        # a match as long as the longest class needs: not extended further, nor others compared
        enough = min(MATCH_CLASSES[-1], len(history))
        before = history[-n - 1] if len(history) > n else None
        best, best_match = -1, 0
        for at in reversed(found[-CANDIDATES:]):
            if at - n < oldest:  # overwritten, as every earlier one
                break
            if best < 0:
                best, best_match = at, n  # the latest occurrence, unless one matches further back
            if before is None or at - n - 1 < oldest or ring[(at - n - 1) % capacity] != before:
                continue
            match = n + 1  # a separator (-1) equals no token, so no match crosses into another sequence
            while (match < enough and at - match - 1 >= oldest
                   and ring[(at - match - 1) % capacity] == history[-match - 1]):
                match += 1
            if match > best_match:
                best, best_match = at, match
                if match >= enough:
                    break
        if best >= 0 and any(ring[(best - n + i) % capacity] != history[i - n] for i in range(n)):
            return -1, 0
        return best, best_match
