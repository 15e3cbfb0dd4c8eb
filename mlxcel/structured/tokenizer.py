"""The grammar engine's view of a llama.cpp vocabulary.

llguidance needs the bytes of every token, which tokens are special (never part of
constrained text), the end-of-generation tokens, and a tokenizer for the occasional
string it must split into tokens. We hand it llama.cpp's own `llama_tokenize` as a
native function pointer, so tokenizing never needs the GIL.

A build reads every token once (~0.2 s for a 49k vocabulary, ~0.6 s for 152k), so
it is done once per model and cached for as long as that model's `Tokenizer` lives.
The result holds a raw pointer to the vocabulary: it must not outlive the model.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
import weakref

import llama_cpp
from llguidance import LLTokenizer

from mlxcel.engine.tokenizer import Tokenizer
from mlxcel.structured.errors import UnsupportedTokenizerError

log = logging.getLogger("mlxcel.structured")

# llguidance treats a token whose bytes start with 0xFF as special: it may be
# produced only where the grammar names it (here: only the EOG tokens, at the end)
SPECIAL_MARKER = b"\xff"

# a model's LLTokenizer, or the reason its vocabulary cannot have one
_cache: weakref.WeakKeyDictionary[Tokenizer, LLTokenizer | str] = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


def grammar_tokenizer(tokenizer: Tokenizer) -> LLTokenizer:
    """The cached LLTokenizer of a model, built on first use (thread-safe); raises
    UnsupportedTokenizerError, every time, for a vocabulary llguidance cannot use."""
    with _cache_lock:
        cached = _cache.get(tokenizer)
        if cached is None:
            started = time.perf_counter()
            try:
                cached = build_lltokenizer(tokenizer)
            except ValueError as exc:
                log.warning("structured output is unavailable for this model: %s", exc)
                cached = str(exc)
            else:
                log.info(
                    "built the grammar tokenizer (%d tokens) in %.2f s",
                    tokenizer.n_vocab,
                    time.perf_counter() - started,
                )
            _cache[tokenizer] = cached
    if isinstance(cached, str):
        raise UnsupportedTokenizerError(f"this model's tokenizer does not support structured output ({cached})")
    return cached


def build_lltokenizer(tokenizer: Tokenizer) -> LLTokenizer:
    """A fresh LLTokenizer over the model's vocabulary; prefer `grammar_tokenizer`."""
    vocab = tokenizer.vocab
    tokens = [_grammar_bytes(tokenizer, t) for t in range(tokenizer.n_vocab)]
    eog = sorted(tokenizer.eog_tokens) or [tokenizer.eos]
    return LLTokenizer.from_llamacpp(  # type: ignore[attr-defined]
        tokens=tokens,
        vocab_ptr=_address(vocab),
        tokenize_fptr=_address(llama_cpp.llama_tokenize),
        eos_token=eog,
    )


def _grammar_bytes(tokenizer: Tokenizer, token: int) -> bytes:
    """The token's bytes, marked special for control tokens and for user-defined
    marker tokens such as `<tool_call>`, so they never appear inside constrained text."""
    piece = tokenizer.special_piece(token)
    attr = int(llama_cpp.llama_vocab_get_attr(tokenizer.vocab, token))
    if attr & llama_cpp.LLAMA_TOKEN_ATTR_CONTROL:
        return SPECIAL_MARKER + piece
    if attr & llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED and _looks_like_marker(piece):
        return SPECIAL_MARKER + piece
    return piece


def _looks_like_marker(piece: bytes) -> bool:
    return len(piece) > 2 and piece.startswith(b"<") and piece.endswith(b">")


def _address(pointer: object) -> int:
    if isinstance(pointer, int):
        return pointer
    value = ctypes.cast(pointer, ctypes.c_void_p).value
    if not value:
        raise ValueError("null pointer")
    return value
