"""GBNF grammars compiled through llguidance's own GBNF front-end, on SmolLM2's
vocabulary: the output they allow, and the reasons they are refused."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from mlxcel.structured import GrammarError, compile_constraint, compile_constraint_async, gbnf_grammar

from .walk import random_logits, walk

GRAMMARS = {
    'root ::= "yes" | "no"': r"(yes|no)",
    'root ::= [0-9]{1,3} ("," [0-9]{1,3}){2}': r"[0-9]{1,3}(,[0-9]{1,3}){2}",
    '# a comment\nroot ::= "a"+ digit\ndigit ::= [0-9]': r"a+[0-9]",
    'root ::= "id-" [a-f]{4}': r"id-[a-f]{4}",
    'root ::= [^\\n"]{3} "!"': r'[^\n"]{3}!',
    'start: "yes" | "no"': r"(yes|no)",  # a Lark text passes unchanged (llama.cpp's %llguidance)
}


@pytest.mark.parametrize("grammar, pattern", GRAMMARS.items())
def test_walks_match_the_grammar(tokenizer, lltokenizer, piece_lengths, grammar, pattern):
    for seed in range(5):
        constraint = compile_constraint(gbnf_grammar(grammar), lltokenizer)
        text = walk(constraint, tokenizer, random_logits(seed, piece_lengths))
        assert re.fullmatch(pattern, text), (grammar, text)


def test_constraint_remembers_its_source(lltokenizer):
    grammar = 'root ::= "yes" | "no"'
    assert compile_constraint(gbnf_grammar(grammar), lltokenizer).source == grammar


def test_llama_cpp_json_grammar_compiles(lltokenizer):
    """llama.cpp's own grammars/json.gbnf, as clients send it."""
    json_gbnf = r'''
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
'''
    assert compile_constraint(gbnf_grammar(json_gbnf), lltokenizer).error is None


@pytest.mark.parametrize("grammar, reason", [
    ("root ::= this is (not valid GBNF", "Expected ')'"),
    ('root ::= foo', "Rule 'foo' not found"),
    ('rot ::= "x"', "No 'root' rule found"),
    ("", "No 'root' rule found"),
    ('root ::= "unterminated', "Unexpected end of input"),
    ("garbage", "Expected ::="),
    ("root ::= " + "(" * 2000 + '"x"' + ")" * 2000, "recursion"),  # refused, not a crashed worker
    ("start: foo", "foo"),  # Lark: an undefined rule, from the matcher's own compile
    ('start: %json {"type": "integer", "minimum": -1e300, "maximum": -1e299}', "2^63"),  # segfaulted llguidance
    ('%llguidance {}\nstart: x\nx: %json{"type": "integer", "const": -' + "9" * 30 + "}", "2^63"),
])
def test_invalid_grammars_are_grammar_errors(lltokenizer, grammar, reason):
    with pytest.raises(GrammarError) as info:
        compile_constraint(gbnf_grammar(grammar), lltokenizer)
    assert str(info.value).startswith("Failed to parse grammar: ")
    assert reason in info.value.reason
    assert "Failed to convert" not in info.value.reason
    assert len(str(info.value)) < 260


def test_async_compile_of_a_bad_grammar(lltokenizer):
    with pytest.raises(GrammarError):
        asyncio.run(compile_constraint_async(gbnf_grammar("root ::= nope"), lltokenizer))


def test_compile_timeout_names_the_grammar(lltokenizer, monkeypatch):
    from mlxcel.structured import grammar as grammar_module

    monkeypatch.setattr(grammar_module, "_compile", lambda *_: __import__("time").sleep(1))
    with pytest.raises(GrammarError, match="compiling the grammar took longer than 0.1 s"):
        compile_constraint(gbnf_grammar('root ::= "a"'), lltokenizer, timeout_s=0.1)


def _top_down_chain(rules: int) -> str:
    """`root ::= r0`, `r0 ::= r1 "a"` ... each rule defined before the one it names."""
    lines = ["root ::= r0", *(f'r{i} ::= r{i + 1} "a"' for i in range(rules)), f'r{rules} ::= "z"']
    return "\n".join(lines)


def test_a_top_down_chain_of_rules_converts_in_linear_time(lltokenizer):
    """llguidance's own converter takes one pass over all the rules per rule of such a
    chain: ~4 s holding the GIL for this 64 KiB grammar."""
    from llguidance.gbnf_to_lark import gbnf_to_lark as llguidance_gbnf_to_lark

    from mlxcel.structured.gbnf import gbnf_to_lark

    grammar = _top_down_chain(3_300)
    started = time.perf_counter()
    constraint = compile_constraint(gbnf_grammar(grammar), lltokenizer)
    assert time.perf_counter() - started < 1.0
    assert constraint.error is None
    small = _top_down_chain(50)  # the same rules as llguidance's, listed dependencies first
    assert _lines(gbnf_to_lark(small)) == _lines(llguidance_gbnf_to_lark(small))


def _lines(lark: str) -> list[str]:
    return sorted(line for line in lark.splitlines() if line)
