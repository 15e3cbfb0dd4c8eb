"""llama-server's /infill prompt, token by token: repository chunks, then the FIM
prefix, suffix and middle around the cursor.

With the model's repo-name and file-separator tokens, the chunks follow the
repo-level pattern (https://arxiv.org/pdf/2409.12186):

    <REP>myproject\\n<SEP>{filename}\\n{text}...<SEP>filename\\n<PRE>{prefix}<SUF>{suffix}<MID>{prompt}

without them each chunk follows a plain "--- snippet ---" separator. Everything is
budgeted as llama-server does: the prefix keeps its last 3/4 of a batch, the suffix
its first 1/4 (less the prompt), the chunks what the context has left.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlxcel.engine.tokenizer import FimTokens, Tokenizer
from mlxcel.turn.errors import NotSupported

REPO_NAME = "myproject\n"  # llama-server's fixed project name
CURRENT_FILE = "filename\n"  # and the name of the file being edited
DEFAULT_FILENAME = "tmp"
CHUNK_SEPARATOR = "\n\n--- snippet ---\n\n"  # before each chunk when the model has no file separator


@dataclass(frozen=True)
class ExtraChunk:
    """One repository chunk of `input_extra`."""

    text: str
    filename: str = DEFAULT_FILENAME


@dataclass(frozen=True)
class InfillBudget:
    """The sizes llama-server budgets an infill prompt by: its batch, its default
    n_predict (the server's, not the request's) and the slot's context."""

    n_batch: int
    n_predict: int
    n_ctx: int


def require_fim(fim: FimTokens) -> None:
    """The model must have the prefix, suffix and middle tokens (llama-server's 501)."""
    missing = "".join(f"{name} token is missing. " for name, token in
                      (("prefix", fim.pre), ("suffix", fim.suf), ("middle", fim.mid)) if token < 0)
    if missing:
        raise NotSupported(f"Infill is not supported by this model: {missing}", code=501)


def tokenize_mixed(tokenizer: Tokenizer, value: str | list[str | int]) -> list[int]:
    """A string, or an array of strings and token ids, as plain text: no BOS, and
    special-token text stays text (as llama-server tokenizes the prefix and suffix)."""
    if isinstance(value, str):
        return tokenizer.encode(value, add_special=False, parse_special=False)
    tokens: list[int] = []
    for part in value:
        if isinstance(part, str):
            tokens += tokenizer.encode(part, add_special=False, parse_special=False)
        else:
            tokens.append(part)
    return tokens


def _extra_tokens(tokenizer: Tokenizer, chunks: list[ExtraChunk]) -> list[int]:
    fim = tokenizer.fim

    def text(value: str) -> list[int]:
        return tokenizer.encode(value, add_special=False, parse_special=False)

    tokens: list[int] = []
    if fim.rep >= 0:
        tokens += [fim.rep, *text(REPO_NAME)]
    for chunk in chunks:
        tokens += [fim.sep, *text(chunk.filename + "\n")] if fim.sep >= 0 else text(CHUNK_SEPARATOR)
        tokens += text(chunk.text)
    if fim.sep >= 0:
        tokens += [fim.sep, *text(CURRENT_FILE)]
    return tokens


def infill_prompt(
    tokenizer: Tokenizer,
    prefix: list[int],
    suffix: list[int],
    chunks: list[ExtraChunk],
    prompt: list[int],
    budget: InfillBudget,
    spm: bool = False,
) -> list[int]:
    """The prompt tokens, in prefix/suffix/middle order (suffix/prefix/middle with `spm`)."""
    fim = tokenizer.fim
    quarter = budget.n_batch // 4
    n_prefix = min(len(prefix), 3 * quarter)
    n_suffix = min(len(suffix), max(0, quarter - (2 + len(prompt))))
    extra = _extra_tokens(tokenizer, chunks)
    n_extra = min(max(0, budget.n_ctx - budget.n_batch - 2 * budget.n_predict), len(extra))

    head = [fim.pre, *prefix[len(prefix) - n_prefix :], *prompt]
    tail = [fim.suf, *suffix[:n_suffix]]
    first, second = (tail, head) if spm else (head, tail)
    bos = [tokenizer.bos] if tokenizer.add_bos else []
    return [*extra[len(extra) - n_extra :], *bos, *first, *second, fim.mid]
