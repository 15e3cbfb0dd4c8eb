"""The tokens a cross-encoder reads for one (query, document) pair, as llama-server
builds them: the model's `rerank` template when its GGUF carries one ({query} and
{document} filled in, special tokens parsed), else BOS query EOS SEP document EOS,
each special token only where the vocabulary says it is added (EOS falls back to SEP
when the vocabulary has none)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import llama_cpp

# (text, add_special, parse_special) -> token ids
Tokenize = Callable[[str, bool, bool], list[int]]


@dataclass(frozen=True)
class PairFormat:
    template: str | None  # the GGUF's `tokenizer.chat_template.rerank`, if any
    bos: int
    eos: int  # the vocabulary's EOS, or its SEP when it has no EOS
    sep: int
    add_bos: bool
    add_eos: bool
    add_sep: bool

    @classmethod
    def of_model(cls, model: llama_cpp.llama_model_p) -> PairFormat:
        vocab = llama_cpp.llama_model_get_vocab(model)
        raw = llama_cpp.llama_model_chat_template(model, b"rerank")
        eos = int(llama_cpp.llama_vocab_eos(vocab))
        sep = int(llama_cpp.llama_vocab_sep(vocab))
        return cls(
            template=raw.decode("utf-8", errors="replace") if raw else None,
            bos=int(llama_cpp.llama_vocab_bos(vocab)),
            eos=eos if eos >= 0 else sep,
            sep=sep,
            add_bos=bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
            add_eos=bool(llama_cpp.llama_vocab_get_add_eos(vocab)),
            add_sep=bool(llama_cpp.llama_vocab_get_add_sep(vocab)),
        )


def pair_tokens(fmt: PairFormat, tokenize: Tokenize, query: str, document: str) -> list[int]:
    if fmt.template is not None:
        text = fmt.template.replace("{query}", query).replace("{document}", document)
        return tokenize(text, False, True)
    tokens: list[int] = [fmt.bos] if fmt.add_bos else []
    tokens += tokenize(query, False, False)
    if fmt.add_eos:
        tokens.append(fmt.eos)
    if fmt.add_sep:
        tokens.append(fmt.sep)
    tokens += tokenize(document, False, False)
    if fmt.add_eos:
        tokens.append(fmt.eos)
    return tokens
