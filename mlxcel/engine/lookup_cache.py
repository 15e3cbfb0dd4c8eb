"""llama.cpp's lookup caches (`--lookup-cache-static`, `--lookup-cache-dynamic`): n-gram
statistics kept in files, drafted from beside prompt lookup.

A lookup cache maps an n-gram (one to four tokens) to how often each token followed it.
The static one is made offline from a corpus (llama.cpp's `llama-lookup-create` writes
its 2-grams) and is only read. The dynamic one holds what the server generated: each
finished output's n-grams are counted into it, and it is written back to its file when
the server has been idle a while after a change and when it stops, so a later server
drafts from what this one wrote. A file that does not exist yet starts empty.

A draft is built a token at a time, as llama.cpp's `common_ngram_cache_draft` does it:
the dynamic counts of the longest n-gram ending the text (longest first) propose the
token seen most often after it, where it was seen often enough and in a large enough
share of the cases (strict thresholds), each candidate weighted by how often the static
counts saw it after the text's last two tokens; failing that, the static counts alone
(lax thresholds). The request's own text is prompt lookup's (prompt_lookup), so the
context counts llama.cpp keeps per request are not kept again here. Drafts are
verified, so each token is the model's pick; the slot's acceptance statistics decide whether
drafting these pays (class LOOKUP_CACHE).

The file format is llama.cpp's: records of an n-gram (four int32 tokens, -1 past its
length), an int32 count of followers, then that many (int32 token, int32 count) pairs,
little-endian as written on the machines llama.cpp runs on.

Memory: the static counts are held in flat arrays (about 40 bytes per 2-gram and 12 per
follower); only its 2-grams are kept, the only ones a draft looks up. The dynamic counts
are a dict, bounded by `max_ngrams` (past it only n-grams already held are counted).
Both belong to the engine thread once the server runs.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlxcel.engine.prompt_lookup import LOOKUP_CACHE, NO_PROPOSAL, Proposal

log = logging.getLogger(__name__)

NGRAM_MAX = 4  # llama.cpp's LLAMA_NGRAM_MAX: the tokens of a record's n-gram
STATIC_NGRAM = 2  # llama.cpp's LLAMA_NGRAM_STATIC: the static counts are looked up by 2-grams
NULL = -1  # LLAMA_TOKEN_NULL: a record's n-gram past its length
# a candidate is drafted only when its n-gram was followed at least this often, and by it in at
# least this share (percent) of the cases; per n-gram length 1..4 (llama.cpp's thresholds)
STRICT_SAMPLES, STRICT_PERCENT = (4, 3, 2, 2), (75, 66, 66, 66)
LAX_SAMPLES, LAX_PERCENT = (2, 2, 1, 1), (66, 50, 50, 50)
DYNAMIC_MAX_NGRAMS = 1 << 20  # n-grams the dynamic counts hold at most (~200 MB of dicts)
SAVE_AFTER_S = 60.0  # a changed dynamic cache is written once the engine has been idle this long
# most tokens a draft from the caches holds: each is a guess from statistics, so few survive
# far (llama.cpp drafts 8), and each costs a lookup on the engine's step
MAX_DRAFT = 16
COUNT_MAX = (1 << 31) - 1


class LookupCacheError(ValueError):
    """A lookup cache file that cannot be read as one (or not for this model)."""


@dataclass(frozen=True)
class Records:
    """A lookup cache file's records as arrays: each record's n-gram (NULL past its
    length) and its followers, flat, with the record each belongs to."""

    ngrams: np.ndarray  # (records, NGRAM_MAX) int32
    lengths: np.ndarray  # (records,) the n-grams' lengths
    owner: np.ndarray  # (followers,) the record of each follower
    tokens: np.ndarray  # (followers,) int32
    counts: np.ndarray  # (followers,) int64


def read_records(path: Path, n_vocab: int) -> Records:
    """A lookup cache file's records. Refuses a file that is not one (a record cut
    short, a count below one, an n-gram with a gap) and one holding a token past
    `n_vocab` (made with another model's vocabulary). One pass in Python finds where the
    records start; the rest is numpy, so a file of millions of records reads in seconds."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise LookupCacheError(f"{path}: {exc.strerror or exc}") from None
    if len(data) % 4:
        raise LookupCacheError(f"{path}: not a lookup cache (its size is not a whole number of int32 values)")
    words = np.frombuffer(data, dtype="<i4").astype(np.int32)  # the host's byte order, for the walk below
    view, end, i = memoryview(words), len(words), 0
    starts = array("q")
    while i < end:
        if i + NGRAM_MAX + 1 > end:
            raise LookupCacheError(f"{path}: not a lookup cache (a record is cut short at byte {4 * i})")
        n = view[i + NGRAM_MAX]
        if n < 1:
            raise LookupCacheError(f"{path}: not a lookup cache (a record at byte {4 * i} claims {n} tokens)")
        if i + NGRAM_MAX + 1 + 2 * n > end:
            raise LookupCacheError(f"{path}: not a lookup cache (a record of {n} tokens at byte {4 * i} is cut short)")
        starts.append(i)
        i += NGRAM_MAX + 1 + 2 * n
    at = np.frombuffer(starts, dtype=np.int64) if starts else np.zeros(0, np.int64)
    ngrams = words[at[:, None] + np.arange(NGRAM_MAX)]
    n_followers = words[at + NGRAM_MAX].astype(np.int64)
    owner = np.repeat(np.arange(len(at)), n_followers)
    within = np.arange(len(owner)) - np.repeat(np.cumsum(n_followers) - n_followers, n_followers)
    places = at[owner] + NGRAM_MAX + 1 + 2 * within
    tokens, counts = words[places], words[places + 1].astype(np.int64)
    null = ngrams == NULL
    lengths = np.where(null.any(axis=1), null.argmax(axis=1), NGRAM_MAX)
    past = np.arange(NGRAM_MAX) >= lengths[:, None]
    bad = (lengths < 1) | (null != past).any(axis=1) | ~(past | ((ngrams >= 0) & (ngrams < n_vocab))).all(axis=1)
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise LookupCacheError(f"{path}: not a lookup cache for this model (the n-gram at byte {4 * int(at[r])} is "
                               f"{ngrams[r].tolist()}; this model has {n_vocab} tokens)")
    bad = (counts < 1) | (tokens < 0) | (tokens >= n_vocab)
    if bad.any():
        f = int(np.flatnonzero(bad)[0])
        raise LookupCacheError(_bad_follower(path, int(tokens[f]), int(counts[f]), n_vocab))
    return Records(ngrams, lengths, owner, tokens, counts)


def read_counts(path: Path, n_vocab: int, max_ngrams: int | None = None) -> dict[tuple[int, ...], dict[int, int]]:
    """The n-gram counts in a lookup cache file (read_records): n-gram -> {token: count},
    the first `max_ngrams` n-grams at most."""
    records = read_records(path, n_vocab)
    keys = [tuple(row[:n]) for row, n in zip(records.ngrams.tolist(), records.lengths.tolist())]
    counts: dict[tuple[int, ...], dict[int, int]] = {}
    room = len(keys) if max_ngrams is None else max_ngrams
    for r, token, count in zip(records.owner.tolist(), records.tokens.tolist(), records.counts.tolist()):
        part = counts.get(keys[r])
        if part is None:
            if room <= 0:
                continue
            part = counts[keys[r]] = {}
            room -= 1
        part[token] = part.get(token, 0) + count
    return counts


def _bad_follower(path: Path, token: int, count: int, n_vocab: int) -> str:
    if count < 1:
        return f"{path}: not a lookup cache (token {token} is counted {count} times)"
    return f"{path}: not a lookup cache for this model (token {token}; this model has {n_vocab} tokens)"


def write_counts(path: Path, counts: dict[tuple[int, ...], dict[int, int]]) -> None:
    """Write `counts` as a lookup cache file llama.cpp reads, in place of the file at
    `path` at once (a reader never sees half of it)."""
    out = array("i")
    for ngram, part in counts.items():
        out.extend(ngram)
        out.extend([NULL] * (NGRAM_MAX - len(ngram)))
        out.append(len(part))
        for token, count in part.items():
            out.append(token)
            out.append(min(count, COUNT_MAX))  # the file's counts are int32
    data = np.frombuffer(out.tobytes(), dtype=np.int32).astype("<i4").tobytes()
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class StaticCounts:
    """A static lookup cache's 2-grams in flat arrays, sorted by 2-gram: each one's
    followers (ascending) with their counts, and its most frequent follower (the lowest
    on a tie), that one's count and the total."""

    def __init__(self, keys: np.ndarray, tokens: np.ndarray, counts: np.ndarray) -> None:
        """From one entry per (2-gram key, follower, count), in any order, repeats adding up."""
        order = np.lexsort((tokens, keys))
        keys, tokens, counts = keys[order], tokens[order], counts[order].astype(np.int64)
        if len(keys):
            fresh = np.ones(len(keys), dtype=bool)
            fresh[1:] = (keys[1:] != keys[:-1]) | (tokens[1:] != tokens[:-1])
            firsts = np.flatnonzero(fresh)
            keys, tokens, counts = keys[firsts], tokens[firsts], np.add.reduceat(counts, firsts)
        new_key = np.ones(len(keys), dtype=bool)
        new_key[1:] = keys[1:] != keys[:-1]
        heads = np.flatnonzero(new_key)
        self.keys = keys[heads]
        self.starts = np.append(heads, len(keys)).astype(np.int64)
        self.tokens, self.tallies = tokens.astype(np.int32), counts
        if len(heads):
            self.total = np.add.reduceat(counts, heads)
            self.best_count = np.maximum.reduceat(counts, heads)
            top = np.flatnonzero(counts == np.repeat(self.best_count, np.diff(self.starts)))
            group = np.searchsorted(heads, top, side="right") - 1
            _, first = np.unique(group, return_index=True)
            self.best = tokens[top[first]]
        else:
            self.total = self.best_count = self.best = np.zeros(0, np.int64)

    @classmethod
    def from_records(cls, records: Records) -> StaticCounts:
        """The 2-grams of a file's records (the only n-grams a draft looks the static
        counts up by; llama-lookup-create writes only those)."""
        pairs = records.lengths == STATIC_NGRAM
        keys = (records.ngrams[:, 0].astype(np.int64) << 32) | records.ngrams[:, 1].astype(np.int64)
        kept = pairs[records.owner]
        return cls(keys[records.owner[kept]], records.tokens[kept], records.counts[kept])

    @classmethod
    def from_counts(cls, counts: dict[tuple[int, ...], dict[int, int]]) -> StaticCounts:
        entries = [(_key(ngram), token, count) for ngram, part in counts.items() if len(ngram) == STATIC_NGRAM
                   for token, count in part.items()]
        keys, tokens, tallies = (np.array(column, dtype=np.int64) for column in zip(*entries)) if entries else (
            np.zeros(0, np.int64),) * 3
        return cls(keys, tokens, tallies)

    def __len__(self) -> int:
        return len(self.keys)

    def find(self, a: int, b: int) -> int:
        """The index of the 2-gram (a, b), or -1."""
        key = _key((a, b))
        i = int(np.searchsorted(self.keys, key))
        return i if i < len(self.keys) and self.keys[i] == key else -1

    def followers(self, index: int) -> dict[int, int]:
        if index < 0:
            return {}
        lo, hi = self.starts[index], self.starts[index + 1]
        return dict(zip(self.tokens[lo:hi].tolist(), self.tallies[lo:hi].tolist()))

    def draft(self, index: int) -> int:
        """The 2-gram's most frequent follower where it passes the lax thresholds, else -1."""
        if index < 0:
            return NULL
        best, total = int(self.best_count[index]), int(self.total[index])
        at = STATIC_NGRAM - 1
        if total < LAX_SAMPLES[at] or 100 * best < LAX_PERCENT[at] * total:
            return NULL
        return int(self.best[index])


def _key(ngram: tuple[int, ...]) -> int:
    return (ngram[0] << 32) | ngram[1]


class LookupCaches:
    """The server's static and dynamic lookup caches (either may be absent), and the
    file the dynamic one is written back to."""

    def __init__(self, static: StaticCounts | None, dynamic: dict[tuple[int, ...], dict[int, int]] | None,
                 dynamic_path: Path | None, max_ngrams: int = DYNAMIC_MAX_NGRAMS) -> None:
        self.static = static
        self.dynamic = dynamic
        self.dynamic_path = dynamic_path
        self.max_ngrams = max_ngrams
        self.changed_at: float | None = None  # when the dynamic counts changed since last written

    @classmethod
    def load(cls, static_path: str | None, dynamic_path: str | None, n_vocab: int) -> LookupCaches:
        """Read the files (a dynamic one that does not exist yet starts empty); a file
        that is not a lookup cache for this vocabulary is refused, naming its flag."""
        static = dynamic = None
        flag = "--lookup-cache-static"
        try:
            if static_path:
                static = StaticCounts.from_records(read_records(Path(static_path), n_vocab))
            flag = "--lookup-cache-dynamic"
            if dynamic_path:
                path = Path(dynamic_path)
                dynamic = read_counts(path, n_vocab, DYNAMIC_MAX_NGRAMS) if path.exists() else {}
        except LookupCacheError as exc:
            raise LookupCacheError(f"{flag} {exc}") from None
        caches = cls(static, dynamic, Path(dynamic_path) if dynamic_path else None)
        log.info("lookup caches: %s", caches.describe())
        return caches

    def describe(self) -> str:
        parts = []
        if self.static is not None:
            parts.append(f"static {len(self.static)} 2-grams")
        if self.dynamic is not None:
            parts.append(f"dynamic {len(self.dynamic)} n-grams ({self.dynamic_path})")
        return ", ".join(parts) or "none"

    def add(self, tokens: Sequence[int], new: int) -> None:
        """Count into the dynamic cache the n-grams of `tokens` that end in its last
        `new` tokens (an output, with the few tokens before it)."""
        counts = self.dynamic
        if counts is None or new <= 0:
            return
        tokens = list(tokens)
        room = self.max_ngrams - len(counts)
        for size in range(1, NGRAM_MAX + 1):
            for i in range(max(len(tokens) - new, size), len(tokens)):
                ngram = tuple(tokens[i - size : i])
                part = counts.get(ngram)
                if part is None:
                    if room <= 0:
                        continue
                    part = counts[ngram] = {}
                    room -= 1
                part[tokens[i]] = part.get(tokens[i], 0) + 1
        self.changed_at = time.monotonic()

    def save_due(self, now: float) -> bool:
        return self.changed_at is not None and now - self.changed_at >= SAVE_AFTER_S

    def save(self) -> None:
        """Write the dynamic counts back to their file, if they changed; a failure is
        logged (the counts are kept and written again next time)."""
        if self.dynamic is None or self.changed_at is None:
            return
        try:
            write_counts(self.dynamic_path, self.dynamic)
        except Exception as exc:  # noqa: BLE001 - the engine thread goes on whatever a write meets
            log.warning("could not write the dynamic lookup cache %s: %s", self.dynamic_path, exc)
            self.changed_at = time.monotonic()  # not at once again: after the next quiet spell
            return
        self.changed_at = None
        log.info("dynamic lookup cache written: %d n-grams to %s", len(self.dynamic), self.dynamic_path)

    def draft(self, history: list[int], limit: int, min_draft: int = 1, dynamic: bool = True) -> Proposal:
        """Up to `limit` tokens (MAX_DRAFT at most) drafted from the caches after
        `history` (without the dynamic counts unless `dynamic`)."""
        if limit < min_draft or len(history) < STATIC_NGRAM:
            return NO_PROPOSAL
        counts = self.dynamic if dynamic else None
        text = history[-NGRAM_MAX:]
        drafted: list[int] = []
        limit = min(limit, MAX_DRAFT)
        while len(drafted) < limit:
            token = self._next(text, counts)
            if token == NULL:
                break
            drafted.append(token)
            text = text[1:] + [token] if len(text) == NGRAM_MAX else text + [token]
        if len(drafted) < min_draft:
            return NO_PROPOSAL
        return Proposal(drafted, 0, LOOKUP_CACHE)

    def _next(self, text: list[int], counts: dict[tuple[int, ...], dict[int, int]] | None) -> int:
        """The token drafted after `text` (its last NGRAM_MAX tokens at most), or NULL."""
        static = self.static
        index = static.find(text[-2], text[-1]) if static is not None else -1
        if counts:
            weights = static.followers(index) if index >= 0 else {}
            for size in range(min(NGRAM_MAX, len(text)), 0, -1):
                part = counts.get(tuple(text[-size:]))
                if part:
                    token = _weighted_pick(part, weights, size - 1)
                    if token != NULL:
                        return token
        return static.draft(index) if static is not None else NULL


def _weighted_pick(part: dict[int, int], weights: dict[int, int], at: int) -> int:
    """The follower with the most count x (100 x its static count, or 1 where the static
    counts never saw it), where the n-gram's counts pass the strict thresholds."""
    best, best_count, best_score, total = NULL, 0, 0, 0
    for token, count in part.items():
        score = count * (100 * weights[token] if token in weights else 1)
        if score > best_score:
            best, best_count, best_score = token, count, score
        total += count
    if total < STRICT_SAMPLES[at] or 100 * best_count < STRICT_PERCENT[at] * total:
        return NULL
    return best
