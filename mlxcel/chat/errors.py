"""Errors in what a client sent for a chat, raised below the HTTP layer and shown as 400s."""

from __future__ import annotations


class ChatInputError(ValueError):
    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
