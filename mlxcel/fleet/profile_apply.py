"""A profile's defaults filled into a request body, before the API validates it.

Each default fills a field only when the body lacks it (a field sent as null counts
as absent), under the name the API reads:

    profile key     chat              completions   native      responses          anthropic
    max_tokens      max_tokens (*)    max_tokens    n_predict   max_output_tokens  max_tokens
    stop            stop              stop          stop        stop               stop_sequences
    thinking_budget thinking_budget   -             -           thinking_budget    -
    other sampling  same name         same name     same name   same name          same name

(*) skipped when the body sets max_completion_tokens or n_predict (and, on
completions and native, when it sets the other of max_tokens / n_predict). Names
that spell the same setting (repeat_penalty / repetition_penalty, repeat_last_n /
repetition_context_size) count as one: a body that sets either keeps its own. A `-`
drops the key for that API.

The system prompt fills chat's messages (a leading system message, when there are
messages and none has role system or developer), Anthropic's `system` and Responses' `instructions` (when
absent and no input item has role system or developer); completions and native have
none. chat_template_kwargs merge under the request's own (its keys win), on the
three template APIs."""

from __future__ import annotations

from typing import Any

from mlxcel.fleet.profiles import RequestDefaults

APIS = ("chat", "completions", "anthropic", "responses", "native")
TEMPLATE_APIS = ("chat", "anthropic", "responses")
SYSTEM_ROLES = ("system", "developer")

# profile key -> (body name, names whose presence in the body skips the default), per API
_MAX_TOKENS = {
    "chat": ("max_tokens", ("max_tokens", "max_completion_tokens", "n_predict")),
    "completions": ("max_tokens", ("max_tokens", "n_predict")),
    "native": ("n_predict", ("n_predict", "max_tokens")),
    "responses": ("max_output_tokens", ("max_output_tokens",)),
    "anthropic": ("max_tokens", ("max_tokens",)),
}
_THINKING_BUDGET = {
    "chat": ("thinking_budget", ("thinking_budget", "thinking_budget_tokens")),
    "responses": ("thinking_budget", ("thinking_budget", "thinking_budget_tokens")),
}
_SAME_SETTING = {
    "repeat_penalty": ("repeat_penalty", "repetition_penalty"),
    "repetition_penalty": ("repeat_penalty", "repetition_penalty"),
    "repeat_last_n": ("repeat_last_n", "repetition_context_size"),
    "repetition_context_size": ("repeat_last_n", "repetition_context_size"),
}


def field_for(api: str, key: str) -> tuple[str, tuple[str, ...]] | None:
    """(body name, names that skip it) for profile key `key` on `api`; None: dropped."""
    if key == "max_tokens":
        return _MAX_TOKENS[api]
    if key == "thinking_budget":
        return _THINKING_BUDGET.get(api)
    if key == "stop" and api == "anthropic":
        return "stop_sequences", ("stop_sequences",)
    return key, _SAME_SETTING.get(key, (key,))


def apply_defaults(api: str, data: dict, defaults: RequestDefaults) -> dict:
    """A new body: `data` with the profile's defaults filled where it has none."""
    if api not in APIS:
        raise ValueError(f"unknown API {api!r}; valid: {', '.join(APIS)}")
    body = dict(data)
    for key, value in defaults.sampling.items():
        target = field_for(api, key)
        if target is None:
            continue
        name, skip_when = target
        if all(body.get(other) is None for other in skip_when):
            if name == "stop_sequences" and isinstance(value, str):
                value = [value]
            body[name] = list(value) if isinstance(value, list) else value
    if defaults.system is not None:
        _fill_system(api, body, defaults.system)
    if api in TEMPLATE_APIS and defaults.chat_template_kwargs:
        _merge_template_kwargs(api, body, dict(defaults.chat_template_kwargs))
    return body


def _has_system(items: Any) -> bool:
    return isinstance(items, list) and any(isinstance(m, dict) and m.get("role") in SYSTEM_ROLES for m in items)


def _fill_system(api: str, body: dict, system: str) -> None:
    if api == "chat":
        messages = body.get("messages")
        if isinstance(messages, list) and messages and not _has_system(messages):
            body["messages"] = [{"role": "system", "content": system}, *messages]
    elif api == "anthropic":
        if body.get("system") is None:
            body["system"] = system
    elif api == "responses" and body.get("instructions") is None and not _has_system(body.get("input")):
        body["instructions"] = system


def _merge_template_kwargs(api: str, body: dict, profile_kwargs: dict) -> None:
    """Under the request's own kwargs, in whichever shape it sent them
    (mlxcel.chat.template_kwargs: top level, extra_body, or preserve_thinking alone)."""
    if api == "chat":  # the route's own switches win over template kwargs; keep the profile's out of their way
        if body.get("enable_thinking") is not None:
            profile_kwargs.pop("enable_thinking", None)
        reasoning = body.get("reasoning")
        if body.get("reasoning_effort") is not None or (isinstance(reasoning, dict) and reasoning.get("effort")):
            profile_kwargs.pop("reasoning_effort", None)
    top = body.get("chat_template_kwargs")
    if top is not None:
        if isinstance(top, dict):  # anything else is the API's 400 to give
            body["chat_template_kwargs"] = {**profile_kwargs, **top}
        return
    extra = body.get("extra_body")
    if isinstance(extra, dict) and extra.get("chat_template_kwargs") is not None:
        nested = extra["chat_template_kwargs"]
        if isinstance(nested, dict):
            body["extra_body"] = {**extra, "chat_template_kwargs": {**profile_kwargs, **nested}}
        return
    for holder in (extra if isinstance(extra, dict) else {}, body):
        preserve = holder.get("preserve_thinking")
        if preserve is not None:
            if isinstance(preserve, bool):
                body["chat_template_kwargs"] = {**profile_kwargs, "preserve_thinking": preserve}
            return
    body["chat_template_kwargs"] = profile_kwargs
