"""`logit_bias` in every form llama-server accepts, and as it reports it back.

Forms: an object {"<token id or string>": bias} (OpenAI's, and llama-server's
extension to strings), or an array of [token id, bias] / [string, bias] pairs. A
string stands for every token it tokenizes to (without BOS, special tokens not
parsed, as llama-server tokenizes it). A bias of `false` bans the token; a number
is added to the logit as given (-100, OpenAI's "ban", is -100 as in llama-server:
in practice a ban); `true` is no bias. Biases for the same token add
up, as llama.cpp's logit-bias sampler adds every entry it is given."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from mlxcel.turn.errors import InvalidRequest

if TYPE_CHECKING:
    from mlxcel.engine.tokenizer import Tokenizer

MAX_BIAS = 100.0


def parse_logit_bias(raw, tokenizer: Tokenizer) -> dict[int, float]:
    """token id -> bias (-inf: banned), in the order the request gave them."""
    if isinstance(raw, dict):
        pairs = list(raw.items())
    else:
        for i, pair in enumerate(raw):
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise InvalidRequest(f"logit_bias[{i}]: expected a [token_id or string, bias] pair")
        pairs = [tuple(p) for p in raw]
    biases: dict[int, float] = {}
    for key, value in pairs:
        bias = _bias(value, key)
        if bias is None:
            continue
        for token in _tokens(key, tokenizer, from_object=isinstance(raw, dict)):
            biases[token] = biases.get(token, 0.0) + bias
    return biases


def _bias(value, key) -> float | None:
    if value is False:
        return -math.inf
    if value is True:
        return None
    if isinstance(value, str) or not isinstance(value, (int, float)):
        raise InvalidRequest(f"logit_bias: the bias for {key!r} must be a number or false")
    if not -MAX_BIAS <= value <= MAX_BIAS:
        raise InvalidRequest(f"logit_bias: bias {value} for {key!r} is outside [-100, 100]")
    return float(value)


def _tokens(key, tokenizer: Tokenizer, from_object: bool) -> list[int]:
    if from_object:  # an object's keys are strings: a whole-number key is a token id
        token = _as_int(key)
        if token is None:
            return tokenizer.encode(key, add_special=False, parse_special=False)
    elif isinstance(key, str):
        return tokenizer.encode(key, add_special=False, parse_special=False)
    elif isinstance(key, int) and not isinstance(key, bool):
        token = key
    else:
        raise InvalidRequest(f"logit_bias: key {key!r} is neither a token id nor a string")
    if not 0 <= token < tokenizer.n_vocab:
        raise InvalidRequest(f"logit_bias: token id {token} is out of vocabulary range "
                             f"(vocab_size {tokenizer.n_vocab})")
    return [token]


def _as_int(key: str) -> int | None:
    text = key.strip()
    digits = text[1:] if text[:1] in "+-" else text
    return int(text) if digits.isdigit() and digits.isascii() else None


def reported_logit_bias(biases: dict[int, float], banned: list[int] = ()) -> list[dict]:
    """llama-server's `generation_settings.logit_bias`: [{"bias", "token"}], a ban's
    -inf written as null (its JSON writer's rendering of -inf); `banned` (the EOG
    tokens `ignore_eos` bans) follow the request's own entries."""
    entries = [(token, bias) for token, bias in biases.items()] + [(token, -math.inf) for token in banned]
    return [{"bias": bias if math.isfinite(bias) else None, "token": token} for token, bias in entries]
