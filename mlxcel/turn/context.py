"""What the HTTP edge tells the layers below about one request, read once from its
headers and scope."""

from __future__ import annotations

from dataclasses import dataclass

from mlxcel.engine.faults import Fault
from mlxcel.engine.request import Priority


@dataclass(frozen=True)
class RequestContext:
    request_id: str  # the id the API answers with (chatcmpl-..., msg_..., resp_...)
    priority: Priority = Priority.NORMAL  # X-Priority
    fault: Fault | None = None  # a test's injected fault (only with MLXCEL_FAULT_INJECTION=1)
    owner: str | None = None  # digest of the API key that sent it (stored state is scoped by it)
