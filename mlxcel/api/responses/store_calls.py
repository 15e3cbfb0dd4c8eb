"""State-store calls off the event loop, on threads of their own. A store that stops
answering holds each call for up to its timeout (10 s for Redis); on asyncio's default
pool (cores + 4 threads) a few such calls would hold every thread that renders chat
templates and tokenizes prompts for all the other APIs."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
from collections.abc import Callable
from typing import Any, TypeVar

STORE_THREADS = 16
_T = TypeVar("_T")
_pool = concurrent.futures.ThreadPoolExecutor(STORE_THREADS, thread_name_prefix="state-store")


async def in_store_thread(fn: Callable[..., _T], *args: Any) -> _T:
    """`fn(*args)` on a store thread, with the caller's context (as asyncio.to_thread)."""
    call = functools.partial(contextvars.copy_context().run, fn, *args)
    return await asyncio.get_running_loop().run_in_executor(_pool, call)
