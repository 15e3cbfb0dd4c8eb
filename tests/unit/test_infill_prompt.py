"""llama-server's /infill prompt layout over a character-level fake vocabulary: the
repo-level pattern, the snippet fallback, the prefix/suffix/extra budgets, SPM order
and BOS, and the 501 for a model without FIM tokens."""

from __future__ import annotations

import pytest

from mlxcel.engine.tokenizer import FimTokens
from mlxcel.turn.errors import NotSupported
from mlxcel.turn.infill_prompt import ExtraChunk, InfillBudget, infill_prompt, require_fim, tokenize_mixed

PRE, SUF, MID, PAD, REP, SEP, BOS = 1001, 1002, 1003, 1004, 1005, 1006, 1007
QWEN_LIKE = FimTokens(PRE, SUF, MID, PAD, REP, SEP)
ROOMY = InfillBudget(n_batch=2048, n_predict=-1, n_ctx=4096)


class CharTokenizer:
    """One token per character (its code point); special-token text is never parsed."""

    def __init__(self, fim: FimTokens = QWEN_LIKE, add_bos: bool = False) -> None:
        self.fim, self.add_bos, self.bos = fim, add_bos, BOS

    def encode(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        assert not add_special
        return [ord(c) for c in text]


def text(tokens: list[int]) -> str:
    names = {PRE: "<PRE>", SUF: "<SUF>", MID: "<MID>", REP: "<REP>", SEP: "<SEP>", BOS: "<BOS>"}
    return "".join(names.get(t, chr(t)) for t in tokens)


def build(tokenizer=None, prefix="def f(", suffix=")\n", chunks=(), prompt="", budget=ROOMY, spm=False) -> str:
    tokenizer = tokenizer or CharTokenizer()
    tokens = infill_prompt(tokenizer, tokenize_mixed(tokenizer, prefix), tokenize_mixed(tokenizer, suffix),
                           list(chunks), tokenizer.encode(prompt, add_special=False), budget, spm)
    return text(tokens)


def test_the_repo_level_pattern_when_the_model_has_its_tokens():
    chunks = [ExtraChunk("x = 1\n", "a.py"), ExtraChunk("y = 2\n")]
    assert build(chunks=chunks, prompt="ab") == (
        "<REP>myproject\n<SEP>a.py\nx = 1\n<SEP>tmp\ny = 2\n<SEP>filename\n<PRE>def f(ab<SUF>)\n<MID>")


def test_without_repo_tokens_chunks_follow_a_snippet_separator():
    tokenizer = CharTokenizer(FimTokens(PRE, SUF, MID))
    assert build(tokenizer, chunks=[ExtraChunk("z", "ignored.py")]) == (
        "\n\n--- snippet ---\n\nz<PRE>def f(<SUF>)\n<MID>")


def test_suffix_prefix_middle_order_and_bos():
    tokenizer = CharTokenizer(FimTokens(PRE, SUF, MID), add_bos=True)
    assert build(tokenizer, spm=True, prompt="p") == "<BOS><SUF>)\n<PRE>def f(p<MID>"
    # the repository header comes even without chunks, before BOS, as in llama-server
    assert build(CharTokenizer(add_bos=True)) == "<REP>myproject\n<SEP>filename\n<BOS><PRE>def f(<SUF>)\n<MID>"


def test_prefix_and_suffix_are_cut_to_their_share_of_the_batch():
    budget = InfillBudget(n_batch=16, n_predict=-1, n_ctx=4096)  # prefix: last 12; suffix: first 4 - 2 - prompt
    out = build(prefix="0123456789abcdefghij", suffix="ABCDEFGH", prompt="p", budget=budget)
    assert out.endswith("<PRE>89abcdefghijp<SUF>A<MID>")


def test_extra_chunks_take_what_the_context_leaves_keeping_the_end():
    # n_ctx - n_batch - 2 * n_predict = 40 - 16 - 2 * 10 = 4 tokens of the chunks, the last ones
    budget = InfillBudget(n_batch=16, n_predict=10, n_ctx=40)
    assert build(chunks=[ExtraChunk("abc")], budget=budget).startswith("ame\n<PRE>")
    budget = InfillBudget(n_batch=2048, n_predict=-1, n_ctx=1024)  # a slot smaller than a batch: no chunks
    assert build(chunks=[ExtraChunk("abc")], budget=budget).startswith("<PRE>")


def test_mixed_prefix_keeps_token_ids_and_special_text_stays_text():
    tokenizer = CharTokenizer()
    assert tokenize_mixed(tokenizer, ["ab", 7, "<|x|>"]) == [97, 98, 7, *map(ord, "<|x|>")]


@pytest.mark.parametrize("fim, missing", [
    (FimTokens(rep=4), "prefix token is missing. suffix token is missing. middle token is missing. "),
    (FimTokens(PRE, -1, MID), "suffix token is missing. "),
])
def test_a_model_without_fim_tokens_is_refused_as_llama_server_does(fim, missing):
    with pytest.raises(NotSupported) as info:
        require_fim(fim)
    assert info.value.message == f"Infill is not supported by this model: {missing}"
    require_fim(QWEN_LIKE)
