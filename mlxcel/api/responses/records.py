"""What the Responses API keeps between requests: stored responses (each with the
history it continues), the final objects of background requests made with store:
false, conversation transcripts, and the reasoning echo.

Responses and conversations belong to the API key that made them (`owner`: a digest
of the key, None when the server has no keys): for any other key they do not exist.
A conversation whose transcript alone outgrows --conversation-store-max-bytes is
refused (400 conversation_too_large) and keeps its last transcript, rather than
being dropped and restarting empty.

The stores live in a StateBackend (mlxcel.state): SQLite by default, Redis when
replicas share state; a record is kept there as a JSON object."""

from __future__ import annotations

from dataclasses import dataclass

from mlxcel.api.responses.input_items import collapse
from mlxcel.api.responses.json_safe import json_safe
from mlxcel.api.responses.reasoning_echo import ReasoningEcho
from mlxcel.config import ResponsesLimits
from mlxcel.state.memory_backend import MemoryBackend
from mlxcel.state.store import StateBackend, json_size
from mlxcel.turn.errors import InvalidRequest, NotFound

STORE_OFF = "response storage is disabled (--responses-store-max-entries 0)"
CONVERSATIONS_OFF = "conversations are disabled (--conversation-store-max-entries 0)"


@dataclass
class ResponseRecord:
    body: dict  # the response object
    history: list[dict]  # the items a previous_response_id continues: prior history, input, output
    owner: str | None = None  # the API key's digest

    @property
    def size(self) -> int:
        return json_size(self.body, self.history)

    def to_json(self) -> dict:
        return {"body": self.body, "history": self.history, "owner": self.owner}

    @classmethod
    def from_json(cls, value: dict | None) -> ResponseRecord | None:
        return None if value is None else cls(value["body"], value["history"], value.get("owner"))


@dataclass
class Conversation:
    owner: str | None
    history: list[dict]


def not_found(response_id: str) -> NotFound:
    return NotFound(f"no response with id '{response_id}' is stored", "not_found")


def conversation_not_found(conversation_id: str) -> NotFound:
    return NotFound(f"no conversation with id '{conversation_id}' is stored", "conversation_not_found")


def conversation_too_large(conversation_id: str, size: int, budget: int) -> InvalidRequest:
    return InvalidRequest(f"conversation '{conversation_id}' would hold about {size} bytes, more than the "
                           f"conversation store's budget of {budget} bytes (--conversation-store-max-bytes): "
                           "compact it or start a new conversation", code="conversation_too_large")


def _conversation(value: dict | None) -> Conversation | None:
    return None if value is None else Conversation(value.get("owner"), value["history"])


class ResponseRecords:
    def __init__(self, limits: ResponsesLimits, prompt_cache: bool, backend: StateBackend | None = None) -> None:
        self.limits = limits
        backend = backend or MemoryBackend()
        self.responses = backend.store("responses", limits.store_max_entries, limits.store_max_bytes,
                                       limits.store_ttl_secs)
        # background store: false results; polled for a while, never continued
        self.ephemeral = backend.store("ephemeral", limits.store_max_entries, limits.store_max_bytes,
                                       limits.background_ephemeral_ttl_secs)
        self.conversations = backend.store("conversations", limits.conversation_max_entries,
                                           limits.conversation_max_bytes, limits.conversation_ttl_secs)
        self.reasoning_echo = ReasoningEcho(limits.reasoning_echo_max_bytes, enabled=prompt_cache)

    @property
    def storing(self) -> bool:
        return self.responses.enabled

    def require_storing(self) -> None:
        if not self.storing:
            raise InvalidRequest(STORE_OFF, code="store_disabled")

    def save(self, record: ResponseRecord, ephemeral: bool = False) -> bool:
        record.history = collapse(record.history)
        record.body = json_safe(record.body)
        store = self.ephemeral if ephemeral else self.responses
        return store.put(record.body["id"], record.to_json(), record.size)

    def find(self, response_id: str, owner: str | None = None) -> ResponseRecord | None:
        record = ResponseRecord.from_json(self.responses.get(response_id) or self.ephemeral.get(response_id))
        return record if record is not None and record.owner == owner else None

    def drop(self, response_id: str, owner: str | None = None) -> bool:
        if self.find(response_id, owner) is None:
            return False
        return (self.responses.pop(response_id) or self.ephemeral.pop(response_id)) is not None

    def previous_history(self, response_id: str, owner: str | None = None) -> list[dict]:
        """An unknown id and another key's are the same 400."""
        self.require_storing()
        record = ResponseRecord.from_json(self.responses.get(response_id))
        if record is None or record.owner != owner:
            ephemeral = ResponseRecord.from_json(self.ephemeral.peek(response_id))
            if ephemeral is not None and ephemeral.owner == owner:
                raise InvalidRequest(f"previous response '{response_id}' was not stored (store: false)",
                                      code="previous_response_not_found")
            raise InvalidRequest(f"previous response '{response_id}' not found", code="previous_response_not_found")
        if not record.history and record.body.get("status") == "failed":  # kept bare (keep_bare): nothing to continue
            raise InvalidRequest(f"previous response '{response_id}' failed and kept no history to continue from: "
                                 f"{(record.body.get('error') or {}).get('message', 'it failed')}",
                                 code="previous_response_not_found")
        return list(record.history)

    # -- conversations ------------------------------------------------------------

    def conversation_history(self, conversation_id: str, owner: str | None = None) -> list[dict]:
        """The transcript so far ([] for a new conversation); another key's is a 404."""
        if not self.conversations.enabled:
            raise InvalidRequest(CONVERSATIONS_OFF, code="conversation_store_disabled")
        conversation = _conversation(self.conversations.get(conversation_id))
        if conversation is None:
            return []
        if conversation.owner != owner:
            raise conversation_not_found(conversation_id)
        return list(conversation.history)

    def check_conversation_size(self, conversation_id: str, history: list[dict]) -> tuple[list[dict], int]:
        """The transcript `history` saves as (collapsed) and its size; a 400
        conversation_too_large when it alone exceeds the budget. A budget of 0 keeps
        nothing and refuses nothing."""
        history = collapse(history)
        size = json_size(history)
        budget = self.conversations.max_bytes
        if budget > 0 and self.conversations.enabled and size > budget:
            raise conversation_too_large(conversation_id, size, budget)
        return history, size

    def save_conversation(self, conversation_id: str, history: list[dict], owner: str | None = None,
                          base: list[dict] | None = None) -> None:
        """Raises (and keeps the last transcript) when the new one is too large or the
        id was meanwhile taken by another key. `base`: the transcript `history` continues
        (its first len(base) items); when another turn was saved since it was read, this
        turn's items are appended to that transcript rather than replacing it."""
        def appended(value: dict | None) -> tuple[dict, int]:
            current = _conversation(value)
            if current is not None and current.owner != owner:
                raise conversation_not_found(conversation_id)
            transcript = history
            if base is not None and current is not None and current.history != base:
                transcript = current.history + history[len(base):]
            transcript, size = self.check_conversation_size(conversation_id, transcript)
            return {"owner": owner, "history": transcript}, size

        # one read-then-write, whichever thread or server records another turn meanwhile
        self.conversations.update(conversation_id, appended)
