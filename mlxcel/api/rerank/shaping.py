"""Scores to answers: the Jina/Cohere envelope for `documents`, TEI's bare array for
`texts`. Both list the best first (ties keep the request's order) and keep `top_n`."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Ranked:
    index: int
    score: float


def ranked(scores: list[float], top_n: int | None) -> list[Ranked]:
    order = sorted(range(len(scores)), key=lambda i: -scores[i])  # stable: ties in request order
    kept = order if top_n is None else order[:top_n]
    return [Ranked(i, scores[i]) for i in kept]


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def jina_envelope(model: str, scores: list[float], documents: list[str], top_n: int | None,
                  return_documents: bool, n_tokens: int) -> dict:
    results = []
    for item in ranked(scores, top_n):
        entry: dict = {"index": item.index, "relevance_score": item.score}
        if return_documents:
            entry["document"] = {"text": documents[item.index]}
        results.append(entry)
    return {"model": model, "object": "list", "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
            "results": results}


def tei_array(scores: list[float], texts: list[str], top_n: int | None, return_text: bool,
              activate: bool) -> list[dict]:
    """`activate`: TEI's `raw_scores: false` on a classifier's logits (a sigmoid)."""
    answer = []
    for item in ranked(scores, top_n):
        entry: dict = {"index": item.index, "score": sigmoid(item.score) if activate else item.score}
        if return_text:
            entry["text"] = texts[item.index]
        answer.append(entry)
    return answer
