"""What the Responses API keeps between requests: stored responses (each with the
history it continues), the final objects of background requests made with store:
false, conversation transcripts, and the reasoning echo."""

from __future__ import annotations

from dataclasses import dataclass

from mlxcel.config import ResponsesLimits
from mlxcel.responses.input_items import collapse
from mlxcel.responses.reasoning_echo import ReasoningEcho
from mlxcel.responses.store import BoundedStore, json_size
from mlxcel.server.errors import APIError, invalid_request

STORE_OFF = "response storage is disabled (--responses-store-max-entries 0)"
CONVERSATIONS_OFF = "conversations are disabled (--conversation-store-max-entries 0)"


@dataclass
class ResponseRecord:
    body: dict  # the response object
    history: list[dict]  # the items a previous_response_id continues: prior history, input, output

    @property
    def size(self) -> int:
        return json_size(self.body, self.history)


def not_found(response_id: str) -> APIError:
    return APIError(404, f"no response with id '{response_id}' is stored", "invalid_request_error", "not_found")


class ResponseRecords:
    def __init__(self, limits: ResponsesLimits, prompt_cache: bool) -> None:
        self.limits = limits
        self.responses: BoundedStore[ResponseRecord] = BoundedStore(
            limits.store_max_entries, limits.store_max_bytes, limits.store_ttl_secs)
        # background store: false results; polled for a while, never continued
        self.ephemeral: BoundedStore[ResponseRecord] = BoundedStore(
            limits.store_max_entries, limits.store_max_bytes, limits.background_ephemeral_ttl_secs)
        self.conversations: BoundedStore[list[dict]] = BoundedStore(
            limits.conversation_max_entries, limits.conversation_max_bytes, limits.conversation_ttl_secs)
        self.reasoning_echo = ReasoningEcho(limits.reasoning_echo_max_bytes, enabled=prompt_cache)

    @property
    def storing(self) -> bool:
        return self.responses.enabled

    def require_storing(self) -> None:
        if not self.storing:
            raise invalid_request(STORE_OFF, code="store_disabled")

    def save(self, record: ResponseRecord, ephemeral: bool = False) -> bool:
        record.history = collapse(record.history)
        store = self.ephemeral if ephemeral else self.responses
        return store.put(record.body["id"], record, record.size)

    def find(self, response_id: str) -> ResponseRecord | None:
        return self.responses.get(response_id) or self.ephemeral.get(response_id)

    def drop(self, response_id: str) -> bool:
        return (self.responses.pop(response_id) or self.ephemeral.pop(response_id)) is not None

    def previous_history(self, response_id: str) -> list[dict]:
        self.require_storing()
        record = self.responses.get(response_id)
        if record is None:
            if response_id in self.ephemeral:
                raise invalid_request(f"previous response '{response_id}' was not stored (store: false)",
                                      code="previous_response_not_found")
            raise invalid_request(f"previous response '{response_id}' not found", code="previous_response_not_found")
        return list(record.history)

    # -- conversations ------------------------------------------------------------

    def conversation_history(self, conversation_id: str) -> list[dict]:
        if not self.conversations.enabled:
            raise invalid_request(CONVERSATIONS_OFF, code="conversation_store_disabled")
        return list(self.conversations.get(conversation_id) or [])

    def save_conversation(self, conversation_id: str, history: list[dict]) -> None:
        history = collapse(history)
        self.conversations.put(conversation_id, history, json_size(history))
