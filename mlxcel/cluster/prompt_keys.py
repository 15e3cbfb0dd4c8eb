"""What a replica tells the router about prompts: the chained block digests of a
request's rendered prompt, and of everything the replica holds (its slots' cached
sequences and its host prompt cache), so the router can send a request where the
longest prefix of its prompt is already computed.

Digests are the first 8 bytes of the host prompt cache's chained block hashes
(16-token blocks), as integers: a digest names a whole prefix, not one block."""

from __future__ import annotations

import hmac
import json
import logging
from typing import TYPE_CHECKING

from mlxcel.engine.prompt_cache import block_hashes
from mlxcel.http.auth import KEY_ID, key_id, presented_keys

if TYPE_CHECKING:
    from fastapi import FastAPI

    from mlxcel.http.envelope import HttpEnvelope
    from mlxcel.turn.model_host import ModelHost

log = logging.getLogger("mlxcel.cluster")
MAX_REPORTED = 1 << 16  # digests one replica reports at most (most recent first)
CHAT = {"/v1/chat/completions", "/chat/completions"}
MESSAGES = {"/v1/messages", "/messages"}
RESPONSES = {"/v1/responses", "/responses"}
COMPLETIONS = {"/v1/completions", "/completions", "/completion"}
ROUTED = CHAT | MESSAGES | RESPONSES | COMPLETIONS


def digests(tokens: list[int]) -> list[int]:
    return [int.from_bytes(h[:8], "little") for h in block_hashes(tokens)]


def held_digests(host: ModelHost) -> list[int]:
    """Every prefix the replica can resume from without prefilling it: its slots'
    sequences first, then the host cache's blocks."""
    engine = host.engine
    found: list[int] = []
    if engine is not None:
        for slot in list(engine.slots):
            found.extend(digests(list(slot.cached_tokens)))
    cache = host.host_cache
    if cache is not None:
        with cache._lock:  # noqa: SLF001 - a consistent copy of the block index
            chains = list(cache._blocks)  # noqa: SLF001
        found.extend(int.from_bytes(h[:8], "little") for h in reversed(chains))
    return list(dict.fromkeys(found))[:MAX_REPORTED]


def _owner(app: FastAPI, envelope: HttpEnvelope) -> str | None:
    keys = app.state.config.api_keys
    if not keys:
        return None
    presented = presented_keys([(k.lower(), v) for k, v in envelope.headers])
    accepted = [p for p in presented if any(hmac.compare_digest(p, k.encode()) for k in keys)]
    return key_id(accepted[0]) if accepted else KEY_ID  # an impossible owner: finds nothing


def prompt_tokens(app: FastAPI, envelope: HttpEnvelope) -> list[int] | None:
    """The prompt `envelope` renders to on this replica; None for a request that has no
    prompt or that the replica would refuse (the router then places it by load)."""
    from mlxcel.turn.chat_turn import RenderedTurn

    host: ModelHost | None = app.state.host
    path = envelope.path.removeprefix(app.state.config.api_prefix or "")
    if host is None or not host.ready or envelope.method != "POST" or path not in ROUTED:
        return None
    if _owner(app, envelope) == KEY_ID:  # a request the replica will refuse (401) costs no rendering
        return None
    try:
        data = json.loads(envelope.body)
        if not isinstance(data, dict):
            return None
        if path in COMPLETIONS:
            prompt = data.get("prompt")
            if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
                return list(prompt)
            return host.tokenizer.encode(prompt) if isinstance(prompt, str) else None
        spec = _chat_spec(app, envelope, path, data, host)
        return RenderedTurn.render(host, spec).prepared.tokens
    except Exception as exc:  # noqa: BLE001 - the replica answers the real request with the real error
        log.debug("no routing key for %s: %s", path, exc)
        return None


def _chat_spec(app: FastAPI, envelope: HttpEnvelope, path: str, data: dict, host: ModelHost):
    from mlxcel.http.json_body import validate

    kwargs = host.config.chat_template_kwargs
    if path in CHAT:
        from mlxcel.api.openai.chat_routes import turn_spec
        from mlxcel.api.openai.chat_wire import ChatCompletionRequest

        return turn_spec(data, validate(ChatCompletionRequest, data), host)
    if path in MESSAGES:
        from mlxcel.api.anthropic.translate import turn_spec
        from mlxcel.api.anthropic.wire import MessagesRequest

        return turn_spec(data, validate(MessagesRequest, data), kwargs, host.config.prefill_assistant)
    from mlxcel.api.responses.input_items import as_items
    from mlxcel.api.responses.translate import conversation_id, turn_spec
    from mlxcel.api.responses.wire import ResponsesRequest

    body = validate(ResponsesRequest, data)
    state, owner = app.state.responses, _owner(app, envelope)
    prior: list[dict] = []
    if body.previous_response_id:
        prior = state.previous_history(body.previous_response_id, owner)
    elif body.conversation is not None:
        prior = state.records.conversation_history(conversation_id(body), owner)
    return turn_spec(data, body, prior + as_items(body.input), kwargs, state.records.reasoning_echo.lookup)
