"""Wire model of llama-server's POST /infill: every /completion field, plus the text
around the cursor. Its own fields are checked by the route, in llama-server's order
and with its messages, so they are typed loosely here."""

from __future__ import annotations

from typing import Any

from mlxcel.api.native.wire import NativeCompletionRequest


class InfillRequest(NativeCompletionRequest):
    prompt: Any = ""  # text after the middle token's place: where the cursor's line already begun
    input_prefix: Any = None  # the code before the cursor: a string, or strings and token ids
    input_suffix: Any = None  # the code after it
    input_extra: Any = None  # repository chunks: [{"filename": str, "text": str}, ...]
