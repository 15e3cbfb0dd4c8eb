"""A completion request's `prompt` as llama-server reads it: one prompt or several,
each a string, a token array, a mixed array of strings and token ids, or an object
{"prompt_string": ..., "multimodal_data": [...]}.

The split follows llama-server: an array holding at least one integer is one prompt
(a token array or a mixed one); any other array is a list of prompts, each read on
its own, and gives one result per element, in order."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlxcel.turn.errors import InvalidRequest

if TYPE_CHECKING:
    from mlxcel.engine.tokenizer import Tokenizer

# the wire type of a `prompt` field: the shape is read here, as llama-server reads it
PromptField = str | dict[str, Any] | list[Any]

PROMPT_STRING = "prompt_string"
MULTIMODAL_DATA = "multimodal_data"
# llama-server's messages, word for word
NO_MULTIMODAL = "Multimodal data provided, but model does not support multimodal requests."
BAD_ELEMENT = ('"prompt" elements must be a string, a list of tokens, a JSON object containing a prompt string, '
               "or a list of mixed strings & tokens.")
EMPTY = '"prompt" must not be empty'


def is_token(value) -> bool:
    """A JSON integer (true and false are not numbers in JSON)."""
    return isinstance(value, int) and not isinstance(value, bool)


def split_prompts(prompt) -> list:
    """The prompts a `prompt` field holds, each still as sent."""
    if isinstance(prompt, list) and not any(is_token(p) for p in prompt):
        return list(prompt)
    return [prompt]


def tokenize_prompts(tokenizer: Tokenizer, prompt, max_prompts: int) -> list[list[int]]:
    prompts = split_prompts(prompt)
    if not prompts:
        raise InvalidRequest(EMPTY)
    if len(prompts) > max_prompts:
        raise InvalidRequest(f"prompt: between 1 and {max_prompts} prompts are accepted (--max-prompts)")
    return [tokenize_one(tokenizer, p) for p in prompts]


def tokenize_one(tokenizer: Tokenizer, prompt) -> list[int]:
    """One prompt's tokens: BOS (where the model adds one) only before a leading string."""
    if isinstance(prompt, dict):
        if PROMPT_STRING not in prompt:
            raise InvalidRequest(BAD_ELEMENT)
        if MULTIMODAL_DATA in prompt:  # llama-server refuses the key on a text-only model, even empty
            raise InvalidRequest(NO_MULTIMODAL)
        prompt = prompt[PROMPT_STRING]
    tokens = _tokens(tokenizer, prompt)
    bad = tokenizer.first_out_of_range(tokens)
    if bad is not None:
        raise InvalidRequest(f"prompt: token id {bad} is out of vocabulary range (vocab_size {tokenizer.n_vocab})")
    if not tokens:
        raise InvalidRequest("prompt: the prompt is empty")
    return tokens


def _tokens(tokenizer: Tokenizer, prompt) -> list[int]:
    if isinstance(prompt, str):
        return tokenizer.encode(prompt, add_special=True, parse_special=True)
    if not isinstance(prompt, list) or not all(is_token(p) or isinstance(p, str) for p in prompt):
        raise InvalidRequest(BAD_ELEMENT)
    if prompt and not any(is_token(p) for p in prompt):  # strings alone nest only as a list of prompts
        raise InvalidRequest(BAD_ELEMENT)
    tokens: list[int] = []
    for i, part in enumerate(prompt):
        if isinstance(part, str):
            tokens += tokenizer.encode(part, add_special=(i == 0), parse_special=True)
        else:
            tokens.append(part)
    return tokens


def per_completion(prompts: list[list[int]], n: int, n_parallel: int) -> list[list[int]]:
    """Each prompt `n` times in a row (prompt-major: result i*n + j is prompt i's j-th
    completion), as llama-server's n_cmpl and OpenAI's `n` lay them out. At most one
    slot's worth per prompt, as llama-server bounds n_cmpl."""
    if not 1 <= n <= n_parallel:
        raise InvalidRequest(f"Field 'n_cmpl': Value must be between 1 <= value <= {n_parallel}, but got {n}")
    return [tokens for tokens in prompts for _ in range(n)]
