"""A chunked response of raw audio bytes, watched for the client going away (abandoned
speech stops at once). A failure after the headers went out ends the response without
its final chunk (the server then closes the connection), so a client cannot take a
cut-off file for a whole one."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from mlxcel.http.sse import WatchedStreamResponse
from mlxcel.turn.errors import TurnError


class ByteStreamResponse(WatchedStreamResponse):
    broken_by = (TurnError,)
    broken_note = "audio stream broken off"

    def __init__(self, chunks: AsyncIterator[bytes], media_type: str, headers: dict[str, str],
                 on_close: Callable[[], None] | None = None) -> None:
        super().__init__(chunks, media_type.encode(), on_close)
        self.raw_headers += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
