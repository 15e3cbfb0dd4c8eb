"""Splitting text to speak into sentences, synthesised (and streamed) one by one: at
sentence punctuation, but not after an abbreviation, an initial or inside a number;
at blank lines and at line breaks that end a line of their own (a heading, a list
item); a sentence longer than `max_chars` is cut at its last comma, semicolon or
dash before the limit, else at a space."""

from __future__ import annotations

import re

MAX_SENTENCE_CHARS = 300

# words that end with a period without ending the sentence (compared lower-case, without the dot)
TITLES = frozenset({
    "mr", "mrs", "ms", "mx", "dr", "prof", "sr", "jr", "st", "mt", "rev", "gen", "col", "capt", "lt", "sgt", "hon",
    "fr"
})
ABBREVIATIONS = TITLES | frozenset({
    "vs", "etc", "e.g", "i.e", "eg", "ie", "cf", "al", "approx", "inc", "ltd", "co", "corp", "dept", "est", "fig",
    "figs", "no", "nos", "vol", "vols", "pp", "ch", "sec", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep",
    "sept", "oct", "nov", "dec", "mon", "tue", "wed", "thu", "fri", "sat", "sun", "a.m", "p.m", "am", "pm", "ave",
    "blvd", "rd", "min", "max", "ft", "lb", "lbs", "oz"
})
# abbreviations that often close a sentence too: a boundary when a capitalised word follows
SENTENCE_FINAL = frozenset({"etc", "al", "inc", "ltd", "co", "corp", "a.m", "p.m", "am", "pm"})
# abbreviations that are also words ("no", "max"): an abbreviation only before a number ("No. 5")
BEFORE_NUMBERS = frozenset({
    "no", "nos", "vol", "vols", "fig", "figs", "pp", "ch", "sec", "min", "max", "est", "sun", "sat", "mar", "dec",
    "wed",
})

_END = re.compile(r"([.!?\u2026\u3002\uff01\uff1f]+)([\"'\u201d\u2019)\]\u00bb]*)(\s+|$)")
_LIST_ITEM = re.compile(r"^\s*(?:[-*\u2022\u2013]|\d+[.)])\s")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_CUT_AT = re.compile(r"[,;:\u2014\u2013]\s|\s[-\u2013\u2014]\s")


def split_sentences(text: str, max_chars: int = MAX_SENTENCE_CHARS) -> list[str]:
    """The sentences of `text`, in order, each stripped, none empty, none longer than
    `max_chars`."""
    out: list[str] = []
    text = _CONTROL.sub(" ", text)  # espeak stops at a NUL; no control character is speech
    for block in _blocks(text):
        for sentence in _sentences(block):
            out.extend(_cut(sentence, max_chars))
    return out


def _blocks(text: str) -> list[str]:
    """Paragraphs, headings and list items: text between line breaks that end a unit.
    A break inside wrapped prose (a line that runs on into a lower-case word) joins
    the lines with a space."""
    blocks: list[str] = []
    current: list[str] = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        stripped = line.strip()
        if not stripped:
            _flush(blocks, current)
            continue
        if current and not _runs_on(current[-1], stripped):
            _flush(blocks, current)
        current.append(stripped)
    _flush(blocks, current)
    return blocks


def _runs_on(previous: str, line: str) -> bool:
    if _LIST_ITEM.match(line):
        return False
    if previous[-1] in ",;-\u2013":
        return True
    return previous[-1].isalnum() and line[0].islower()


def _flush(blocks: list[str], current: list[str]) -> None:
    if current:
        blocks.append(" ".join(current))
        current.clear()


def _sentences(block: str) -> list[str]:
    out: list[str] = []
    start = 0
    for match in _END.finditer(block):
        end = match.end()
        if end < len(block) and not _is_boundary(block, match):
            continue
        piece = " ".join(block[start:end].split())
        if piece:
            out.append(piece)
        start = end
    rest = " ".join(block[start:].split())
    if rest:
        out.append(rest)
    return out


def _is_boundary(text: str, match: re.Match) -> bool:
    marks, following = match.group(1), text[match.end():]
    next_word = following.split(maxsplit=1)[0] if following.strip() else ""
    starts_lower = next_word[:1].islower()
    if marks != ".":
        return not (marks in ("...", "\u2026") and starts_lower)  # "wait... what" runs on
    if match.group(2):  # closing quote or bracket after the period
        return not starts_lower
    word = text[:match.start()].rsplit(maxsplit=1)[-1] if text[:match.start()].strip() else ""
    word = word.lstrip("\"'(\u201c\u2018[").lower()
    if len(word) == 1 and word.isalpha():  # an initial: "J. Smith", "U.S. Army" ends here in "U.S."
        return False
    if re.fullmatch(r"(?:[a-z]\.)+[a-z]", word):  # "u.s", "e.g", "a.m"
        return word in SENTENCE_FINAL and next_word[:1].isupper()
    if word in BEFORE_NUMBERS:
        return not next_word[:1].isdigit() and not starts_lower
    if word in ABBREVIATIONS:
        return word in SENTENCE_FINAL and next_word[:1].isupper() and word not in TITLES
    return not starts_lower


def _cut(sentence: str, max_chars: int) -> list[str]:
    """A long sentence in pieces of at most `max_chars`: at the last clause break
    (comma, semicolon, colon, dash) that leaves a piece at least a third of the limit,
    else at the last space, else anywhere."""
    pieces: list[str] = []
    rest = sentence
    while len(rest) > max_chars:
        window = rest[: max_chars + 1]
        at = -1
        for match in _CUT_AT.finditer(window):
            if match.start() + 1 >= max_chars // 3:
                at = match.start() + 1
        if at <= 0:
            at = window.rfind(" ")
        if at <= 0:
            at = max_chars
        head, rest = rest[:at].strip(), rest[at:].strip()
        if head:
            pieces.append(head)
    if rest:
        pieces.append(rest)
    return pieces
