"""Tokenization over a llama.cpp vocabulary.

The vocabulary is immutable once loaded, so these calls are safe from any thread.
Pieces of every token are read once at load time so the decode loop turns ids into
bytes with a slice instead of a foreign call. They are kept as one bytes string and
an offset table (~1.5 MB on a 152k vocabulary, against ~8 MB as a list of bytes).
"""

from __future__ import annotations

import ctypes
from array import array
from dataclasses import dataclass

import llama_cpp

from mlxcel.engine.special_split import SpecialSplitter


class TokenizeError(ValueError):
    pass


@dataclass(frozen=True)
class FimTokens:
    """The fill-in-the-middle tokens, -1 where the vocabulary has none. llama.cpp takes
    them from the GGUF's tokenizer.ggml.fim_* keys or, without those, finds them by
    their text (Qwen2.5-Coder's <|fim_prefix|>, <|repo_name|>, <|file_sep|>, ...)."""

    pre: int = -1
    suf: int = -1
    mid: int = -1
    pad: int = -1
    rep: int = -1  # repository name, for the repo-level pattern
    sep: int = -1  # file separator

    @classmethod
    def of(cls, vocab: llama_cpp.llama_vocab_p) -> FimTokens:
        return cls(*(int(getattr(llama_cpp, f"llama_vocab_fim_{name}")(vocab))
                     for name in ("pre", "suf", "mid", "pad", "rep", "sep")))


class Tokenizer:
    def __init__(self, vocab: llama_cpp.llama_vocab_p, render_special: bool = False) -> None:
        """`render_special`: generated control tokens contribute their text (-sp)."""
        self._vocab = vocab
        self.render_special = render_special
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(vocab))
        self.bos = int(llama_cpp.llama_vocab_bos(vocab))
        self.eos = int(llama_cpp.llama_vocab_eos(vocab))
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
        self.eog_tokens = frozenset(
            t for t in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, t)
        )
        self.fim = FimTokens.of(vocab)
        joined, self._piece_ends = bytearray(), array("q", [0])
        for t in range(self.n_vocab):  # one piece alive at a time: no list of 152k objects, even briefly
            joined += self._piece(t, special=render_special)
            self._piece_ends.append(len(joined))
        self._piece_bytes = bytes(joined)
        self.add_eos = bool(llama_cpp.llama_vocab_get_add_eos(vocab))
        self.add_sep = bool(llama_cpp.llama_vocab_get_add_sep(vocab))
        self._splitters = self._special_splitters()

    def _special_splitters(self) -> dict[bool, SpecialSplitter]:
        """Keyed by parse_special, over what llama.cpp matches as special tokens in a
        text: control, user-defined and unknown tokens when it parses special tokens;
        otherwise only user-defined tokens that are neither control nor unknown."""
        parsed_only = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
        special = parsed_only | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
        texts: dict[bool, list[str]] = {True: [], False: []}
        lstrip: list[str] = []
        for token in range(self.n_vocab):
            attrs = llama_cpp.llama_vocab_get_attr(self._vocab, token)
            if not attrs & special:
                continue
            text = llama_cpp.llama_vocab_get_text(self._vocab, token).decode("utf-8", errors="replace")
            texts[True].append(text)
            if not attrs & parsed_only:
                texts[False].append(text)
            if attrs & llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP:
                lstrip.append(text)
        return {parse: SpecialSplitter(texts[parse], lstrip) for parse in (True, False)}

    @property
    def vocab(self) -> llama_cpp.llama_vocab_p:
        """The llama.cpp vocabulary (read-only; lives as long as its model)."""
        return self._vocab

    def _piece(self, token: int, *, special: bool) -> bytes:
        if token < 0:  # a media position's stand-in id
            return b""
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, 64, 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, -n, 0, special)
        return buf.raw[:n]

    def encode(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        pieces = self._splitters[parse_special].pieces(text)
        if len(pieces) == 1:
            return self._encode(text, add_special, parse_special)
        tokens = [t for piece in pieces for t in self._encode(piece, False, parse_special)]
        if add_special:  # what llama.cpp adds around a whole text
            tokens = ([self.bos] if self.add_bos else []) + tokens
            if self.add_eos:
                tokens.append(self.eos)
            if self.add_sep:
                tokens.append(int(llama_cpp.llama_vocab_sep(self._vocab)))
        return tokens

    def _encode(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode("utf-8", errors="replace")
        capacity = len(data) + 8
        tokens = (llama_cpp.llama_token * capacity)()
        n = llama_cpp.llama_tokenize(self._vocab, data, len(data), tokens, capacity, add_special, parse_special)
        if n < 0:
            capacity = -n
            tokens = (llama_cpp.llama_token * capacity)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), tokens, capacity, add_special, parse_special)
        if n < 0:
            raise TokenizeError("tokenization failed")
        return list(tokens[:n])

    def piece(self, token: int) -> bytes:
        """The bytes a generated token contributes to output text (control tokens: none,
        unless rendered: `render_special`)."""
        ends = self._piece_ends
        return self._piece_bytes[ends[token] : ends[token + 1]]

    def special_piece(self, token: int) -> bytes:
        """The token's text with control tokens rendered, as /tokenize shows pieces."""
        return self._piece(token, special=True)

    def decode(self, tokens: list[int], *, render_special: bool = True) -> str:
        """The text of `tokens`; a media position's stand-in id (negative) has none."""
        if any(token < 0 for token in tokens):
            tokens = [token for token in tokens if token >= 0]
        if not tokens:
            return ""
        ids = array("i", tokens)  # one copy in C: ctypes' own unpacking of 1M ids holds the GIL five times longer
        arr = (llama_cpp.llama_token * len(ids)).from_buffer(ids)
        capacity = max(64, len(tokens) * 8)
        for _ in range(2):
            buf = ctypes.create_string_buffer(capacity)
            n = llama_cpp.llama_detokenize(self._vocab, arr, len(tokens), buf, capacity, False, render_special)
            if n >= 0:
                return buf.raw[:n].decode("utf-8", errors="replace")
            capacity = -n
        raise TokenizeError("detokenization failed")

    def is_marker(self, token: int) -> bool:
        """A control or user-defined token: one the model emits whole, never spelt."""
        attrs = llama_cpp.llama_vocab_get_attr(self._vocab, token)
        return bool(attrs & (llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED))

    def is_eog(self, token: int) -> bool:
        return token in self.eog_tokens

    def first_out_of_range(self, tokens: list[int]) -> int | None:
        for t in tokens:
            if t < 0 or t >= self.n_vocab:
                return t
        return None
