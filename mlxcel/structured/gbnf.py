"""GBNF to Lark through llguidance's own front-end, in time linear in the rules.

llguidance's converter (`gbnf_to_lark`, Python) parses the rules, then finds those
that are terminals by passing over them in the order they are defined until a pass
changes nothing. A terminal rule is found only after the rules it names, so a chain of
rules defined top-down (`a ::= b "x"`, `b ::= c "x"` ...) costs one pass per rule:
a 64 KiB chain of 3,300 rules took seconds holding the GIL, slowing every request and
timing out the constrained ones behind it. Here the parsed rules reach that search
with each rule after the rules it names, so it ends in two passes; the Lark text
lists the rules in that order, which changes nothing of the grammar.
"""

from __future__ import annotations

from llguidance.gbnf_to_lark import GrammarParser, RuleNode, RuleRefNode, is_lark_syntax, resolve

LARK_HEADER = "%llguidance {}\n\n"


def gbnf_to_lark(text: str) -> str:
    """The Lark grammar of a GBNF text (a Lark text as it is); raises ValueError with
    llguidance's reason for a grammar it cannot convert."""
    if is_lark_syntax(text):
        return text
    try:
        rules = GrammarParser().parse(text)
        rules = {name: rules[name] for name in _named_rules_first(rules)}
        resolve(rules)
    except Exception as exc:  # the front-end raises bare Exceptions, RecursionError on deep nesting
        raise ValueError(str(exc)) from None
    return LARK_HEADER + "\n".join(str(rule) for rule in sorted(rules.values(), key=lambda rule: rule.order)) + "\n"


def _named_rules_first(rules: dict[str, RuleNode]) -> list[str]:
    """Every rule's name, each after the names of the rules it refers to (a depth-first
    post-order, iterative; a cycle is cut where it closes, an unknown name skipped)."""
    ordered: list[str] = []
    seen: set[str] = set()
    for root in rules:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(_referenced(rules[root])))]
        while stack:
            name, pending = stack[-1]
            child = next((ref for ref in pending if ref in rules and ref not in seen), None)
            if child is None:
                ordered.append(name)
                stack.pop()
            else:
                seen.add(child)
                stack.append((child, iter(_referenced(rules[child]))))
    return ordered


def _referenced(rule: RuleNode) -> list[str]:
    """The names of the rules that `rule`'s alternatives refer to, walked iteratively."""
    names: list[str] = []
    nodes = [rule.alternatives]
    while nodes:
        node = nodes.pop()
        if isinstance(node, RuleRefNode):
            names.append(node.name)
        nodes.extend(node.children())
    return names
