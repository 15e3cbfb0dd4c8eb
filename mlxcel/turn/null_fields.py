"""Wire models that read a null as a field not sent: OpenAI's nullable fields and
llama-server's json_value (a null is the field's default) take it so, and clients that
serialize every field send them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, model_validator


class NullAsAbsent(BaseModel):
    """A field sent as null reads as one not sent where it has a default: OpenAI's
    nullable fields (`n`, `stream`, `logprobs`, `echo` ...) and llama-server, which
    reads a null as the default, take it so; a null for a required field still fails."""

    @model_validator(mode="before")
    @classmethod
    def _null_as_absent(cls, body: Any) -> Any:
        if not isinstance(body, dict):
            return body
        fields = cls.model_fields
        nulls = [name for name, value in body.items()
                 if value is None and name in fields and not fields[name].is_required()]
        return {name: value for name, value in body.items() if name not in nulls} if nulls else body
