"""Responses input items for tests: a user message, an assistant message, a call and its output."""

from __future__ import annotations


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def call(call_id):
    return {"type": "function_call", "call_id": call_id, "name": "f", "arguments": "{}"}


def result(call_id):
    return {"type": "function_call_output", "call_id": call_id, "output": "r"}
