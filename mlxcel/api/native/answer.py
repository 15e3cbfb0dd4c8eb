"""The bodies of llama-server's native completion answers: the final result (with
`completion_probabilities`, `generation_settings`, `response_fields`) and the
streamed partial chunks."""

from __future__ import annotations

from dataclasses import dataclass

from mlxcel.engine.request import GenerationRequest, TokenEvent
from mlxcel.engine.tokenizer import Tokenizer
from mlxcel.turn.completion_probs import CompletionProbs, before_stop_word
from mlxcel.turn.generation import Completion
from mlxcel.turn.generation_settings import generation_settings
from mlxcel.turn.verbose import stop_type


@dataclass
class CompletionAnswer:
    """What every body of one native completion shares."""

    model: str
    tokenizer: Tokenizer
    return_tokens: bool
    stream: bool
    n_probs: int  # as requested (generation_settings reports it)
    probs: CompletionProbs | None  # set when the request asked for probabilities
    speculative: str = "none"  # the server's speculation type, as generation_settings names it

    def final_body(self, index: int, content: str, result: Completion, request: GenerationRequest) -> dict:
        finish = result.finish
        body = {
            "index": index,
            "content": content,
            # streamed, the chunks carried the tokens already (llama-server's final chunk has none)
            "tokens": result.tokens if self.return_tokens and not self.stream else [],
            "id_slot": finish.slot_id if finish.slot_id is not None else -1,
            "stop": True,
            "model": self.model,
            "tokens_predicted": finish.completion_tokens,
            "tokens_evaluated": finish.prompt_tokens,
            "generation_settings": generation_settings(
                request.sampling, request.max_tokens, request.stop, request.ignore_eos, seed=finish.seed,
                banned_eog=self.tokenizer.eog_tokens, n_probs=self.n_probs,
                post_sampling_probs=request.post_sampling_probs, stream=self.stream,
                grammar=getattr(request.constraint, "source", ""), n_keep=request.n_keep, n_discard=request.n_discard,
                speculative=self.speculative, lora=request.lora,
            ),
            "prompt": self.tokenizer.decode(request.prompt_tokens),
            "has_new_line": "\n" in result.text,
            "truncated": finish.truncated,
            "stop_type": stop_type(finish),
            "stopping_word": finish.stop_word or "",
            "tokens_cached": finish.prompt_tokens + finish.completion_tokens,
            "timings": finish.timings.to_dict(),
        }
        if self.probs is not None and not self.stream:
            body["completion_probabilities"] = self.probs.entries(self._probed(result))
        return body

    def _probed(self, result: Completion) -> list[TokenEvent]:
        """The tokens whose probabilities a non-streamed answer lists: every generated
        one (the end-of-generation token included), less as many as the stop word
        tokenizes to, as llama-server cuts them."""
        events = list(result.events)
        finish = result.finish
        if finish.end_token is not None:
            events.append(finish.end_token)
        return before_stop_word(events, finish.stop_word, self.tokenizer)

    def partial(self, index: int, event: TokenEvent, n_predicted: int, n_prompt: int, id_slot: int) -> dict:
        body = {
            "index": index,
            "content": event.text,
            "tokens": [event.token],  # llama-server's stream chunks carry their token whatever return_tokens says
            "stop": False,
            "id_slot": id_slot,
            "tokens_predicted": n_predicted,
            "tokens_evaluated": n_prompt,
        }
        if self.probs is not None:
            body["completion_probabilities"] = [self.probs.entry(event)]
        return body


@dataclass(frozen=True)
class NativeStreamOptions:
    timings_per_token: bool = False  # every chunk carries the timings so far
    return_progress: bool = False  # prompt_progress chunks while the prompt prefills


def selected_fields(body: dict, fields: list[str] | None) -> dict:
    """llama-server's `response_fields`: only the named fields, a "a/b" path reaching
    into objects and keyed by the path as written; missing ones are left out."""
    if not fields:
        return body
    chosen = {}
    for path in fields:
        value, found = body, True
        for key in path.split("/"):
            if isinstance(value, dict) and key in value:
                value = value[key]
            else:
                found = False
                break
        if found:
            chosen[path] = value
    return chosen
