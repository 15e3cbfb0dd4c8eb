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
verified, so the output never changes; the slot's acceptance statistics decide whether
drafting these pays (class LOOKUP_CACHE).

The file format is llama.cpp's: records of an n-gram (four int32 tokens, -1 past its
length), an int32 count of followers, then that many (int32 token, int32 count) pairs,
little-endian as written on the machines llama.cpp runs on.

Memory: the static counts are held in flat arrays (about 24 bytes per n-gram and 8 per
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


class LookupCacheError(ValueError):
    """A lookup cache file that cannot be read as one (or not for this model)."""


def read_counts(path: Path, n_vocab: int) -> dict[tuple[int, ...], dict[int, int]]:
    """The n-gram counts in a lookup cache file: n-gram -> {token: count}. Refuses a
    file that is not one (a record cut short, a count below one, an n-gram with a gap)
    and one holding a token past `n_vocab` (made with another model's vocabulary)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise LookupCacheError(f"{path}: {exc.strerror or exc}") from None
    if len(data) % 4:
        raise LookupCacheError(f"{path}: not a lookup cache (its size is not a whole number of int32 values)")
    words = np.frombuffer(data, dtype="<i4").tolist()
    counts: dict[tuple[int, ...], dict[int, int]] = {}
    i, end = 0, len(words)
    while i < end:
        if i + NGRAM_MAX + 1 > end:
            raise LookupCacheError(f"{path}: not a lookup cache (a record is cut short at byte {4 * i})")
        ngram = _ngram(words[i : i + NGRAM_MAX], path, i, n_vocab)
        n = words[i + NGRAM_MAX]
        i += NGRAM_MAX + 1
        if n < 1:
            raise LookupCacheError(f"{path}: not a lookup cache (a record at byte {4 * (i - 1)} claims {n} tokens)")
        if i + 2 * n > end:
            raise LookupCacheError(f"{path}: not a lookup cache (a record of {n} tokens is cut short at byte {4 * i})")
        part = counts.setdefault(ngram, {})
        for token, count in zip(words[i : i + 2 * n : 2], words[i + 1 : i + 2 * n : 2]):
            if count < 1 or not 0 <= token < n_vocab:
                raise LookupCacheError(_bad_follower(path, token, count, n_vocab))
            part[token] = part.get(token, 0) + count
        i += 2 * n
    return counts


def _ngram(tokens: list[int], path: Path, at: int, n_vocab: int) -> tuple[int, ...]:
    length = tokens.index(NULL) if NULL in tokens else NGRAM_MAX
    ngram = tuple(tokens[:length])
    if not ngram or any(t != NULL for t in tokens[length:]) or any(not 0 <= t < n_vocab for t in ngram):
        raise LookupCacheError(f"{path}: not a lookup cache for this model (the n-gram at byte {4 * at} is "
                               f"{tokens}; this model has {n_vocab} tokens)")
    return ngram


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
            out.append(count)
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
    """A static lookup cache's 2-grams in flat arrays: each 2-gram's followers with
    their counts, and its most frequent follower, that one's count and the total."""

    def __init__(self, counts: dict[tuple[int, ...], dict[int, int]]) -> None:
        pairs = sorted((_key(ngram), part) for ngram, part in counts.items() if len(ngram) == STATIC_NGRAM)
        self.keys = np.array([key for key, _ in pairs], dtype=np.int64)
        self.starts = np.zeros(len(pairs) + 1, dtype=np.int64)
        tokens, tallies, best, best_count, total = array("i"), array("i"), array("i"), array("i"), array("q")
        for n, (_, part) in enumerate(pairs):
            top = max(part.items(), key=lambda item: (item[1], -item[0]))
            best.append(top[0])
            best_count.append(top[1])
            total.append(sum(part.values()))
            tokens.extend(part.keys())
            tallies.extend(part.values())
            self.starts[n + 1] = len(tokens)
        self.tokens = np.frombuffer(tokens, dtype=np.int32) if tokens else np.zeros(0, np.int32)
        self.tallies = np.frombuffer(tallies, dtype=np.int32) if tallies else np.zeros(0, np.int32)
        self.best, self.best_count, self.total = best.tolist(), best_count.tolist(), total.tolist()

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
        best, total = self.best_count[index], self.total[index]
        at = STATIC_NGRAM - 1
        if total < LAX_SAMPLES[at] or 100 * best < LAX_PERCENT[at] * total:
            return NULL
        return self.best[index]


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
                static = StaticCounts(read_counts(Path(static_path), n_vocab))
            flag = "--lookup-cache-dynamic"
            if dynamic_path:
                path = Path(dynamic_path)
                dynamic = read_counts(path, n_vocab) if path.exists() else {}
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
        except OSError as exc:
            log.warning("could not write the dynamic lookup cache %s: %s", self.dynamic_path, exc)
            self.changed_at = time.monotonic()  # not at once again: after the next quiet spell
            return
        self.changed_at = None
        log.info("dynamic lookup cache written: %d n-grams to %s", len(self.dynamic), self.dynamic_path)

    def draft(self, history: list[int], limit: int, min_draft: int = 1, dynamic: bool = True) -> Proposal:
        """Up to `limit` tokens drafted from the caches after `history` (without the
        dynamic counts unless `dynamic`)."""
        if limit < min_draft or len(history) < STATIC_NGRAM:
            return NO_PROPOSAL
        counts = self.dynamic if dynamic else None
        text = history[-NGRAM_MAX:]
        drafted: list[int] = []
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
