"""Deterministic, varied English-like prompts; a long prompt sized by /tokenize."""
from __future__ import annotations

import random

import httpx

from client import tokenize

_WORDS = """
river mountain engine garden letter window market winter summer village
teacher doctor farmer sailor painter student captain soldier merchant child
bright quiet heavy narrow ancient gentle sudden careful distant golden
walks builds carries watches follows gathers repairs measures describes remembers
bridge forest harbor castle library station kitchen orchard island valley
slowly quickly rarely often calmly loudly softly early later nearly
copper silver marble timber cotton paper glass stone water bread
because although while after before until since unless whereas whenever
seven twelve forty hundred several many few most each every
storm shadow signal thread mirror compass lantern ladder basket candle
"""
WORDS = _WORDS.split()


def sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(6, 16))]
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words)), str(rng.randint(2, 1999)))
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice(".....?!")


def text_words(seed: str, n_words: int) -> str:
    """About `n_words` words of deterministic text for `seed`."""
    rng = random.Random(seed)
    out: list[str] = []
    count = 0
    while count < n_words:
        s = sentence(rng)
        out.append(s)
        count += len(s.split())
    return " ".join(out)


def short_prompt(seed: str) -> str:
    """A distinct short prompt (~20-40 tokens)."""
    rng = random.Random(seed)
    return f"Story {seed}. {sentence(rng)} {sentence(rng)} Continue the story:"


async def long_prompt(client: httpx.AsyncClient, url: str, seed: str,
                      target_tokens: int) -> tuple[str, int]:
    """Text of about `target_tokens` tokens (per the server's /tokenize).

    Binary search over a word-count prefix of one deterministic word sequence,
    so the same seed gives the same prompt on every server.
    """
    words = text_words(seed, target_tokens * 2).split()
    lo, hi = 1, len(words)
    while lo < hi:                              # smallest prefix >= target tokens
        mid = (lo + hi) // 2
        if await tokenize(client, url, " ".join(words[:mid])) >= target_tokens:
            hi = mid
        else:
            lo = mid + 1
    text = " ".join(words[:lo])
    return text, await tokenize(client, url, text)
