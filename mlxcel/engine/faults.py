"""How the engine tells one request's failure from its own.

A failure while admitting, prefilling, sampling or finishing one request fails that
request alone. A batch that llama_decode refuses is split and retried; only a lone
sequence it still refuses fails, and only a refusal that no split can explain (or the
engine thread dying) is a failure of the llama context itself, after which the engine
accepts nothing and the server drains and exits for its supervisor to restart it.

Tests inject faults through `GenerationRequest.fault` (set from the
`X-Mlxcel-Fault` header only when the server runs with MLXCEL_FAULT_INJECTION=1)."""

from __future__ import annotations

import enum
import os

FAULT_INJECTION_ENV = "MLXCEL_FAULT_INJECTION"
FAULT_HEADER = "x-mlxcel-fault"


class Fault(str, enum.Enum):
    ADMIT = "admit"  # raise while admitting the request into a slot
    SAMPLE = "sample"  # raise while sampling the request's token
    SPLIT = "split"  # llama_decode refuses any batch that holds the request beside others
    DECODE = "decode"  # llama_decode refuses every batch that holds the request
    CONTEXT = "context"  # llama_decode fails as a broken context would
    CRASH = "crash"  # the engine thread itself raises outside any request


class InjectedFault(RuntimeError):
    pass


class EngineFailedError(RuntimeError):
    """The llama context failed; the engine accepts nothing more."""


# llama_decode: 1 means no memory slot for the batch and -1 an invalid batch (a lone
# sequence that gets either cannot be served); 2 (aborted) and below -1 (allocation or
# compute failure) on a lone sequence mean the context is broken.
REQUEST_LEVEL_CODES = frozenset({1, -1})
INJECTED_NO_ROOM = 1
INJECTED_COMPUTE_FAILURE = -3


def injection_enabled() -> bool:
    return os.environ.get(FAULT_INJECTION_ENV, "").strip() in ("1", "true", "yes", "on")


def parse_fault(header: str | None) -> Fault | None:
    """The fault a test asks for, when injection is on; None otherwise."""
    if not header or not injection_enabled():
        return None
    try:
        return Fault(header.strip().lower())
    except ValueError:
        return None
