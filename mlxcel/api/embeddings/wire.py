"""Wire models of the embedding routes. One request model serves both shapes, as
llama-server reads them: `input` (or, natively, `content`) as a string, an array of
strings, a token array or an array of token arrays."""

from __future__ import annotations

from pydantic import ConfigDict, Field, StrictBool, StrictInt, StrictStr

from mlxcel.turn.errors import InvalidRequest
from mlxcel.turn.null_fields import NullAsAbsent

MAX_INPUTS = 2048  # OpenAI's own cap on inputs per request

InputField = StrictStr | list[StrictStr | StrictInt | list[StrictInt]]


class EmbeddingsRequest(NullAsAbsent):
    model_config = ConfigDict(extra="allow")

    input: InputField | None = None
    content: InputField | None = None  # llama-server's native name; on /v1/embeddings it asks for the native shape
    model: str | None = None
    encoding_format: str | None = None  # float | base64
    dimensions: int | None = None
    embd_normalize: int | None = None  # llama-server: -1 none, 0 max-abs, 1 taxicab, 2 euclidean, >2 p-norm
    truncate: StrictBool = False  # TEI: cut inputs longer than the model takes instead of refusing them
    user: str | None = Field(default=None, max_length=256)

    def inputs(self) -> list[str | list[int]]:
        """Each input to embed: a text, or token ids."""
        value = self.input if self.input is not None else self.content
        if value is None:
            raise InvalidRequest('"input" or "content" must be provided')
        if isinstance(value, str):
            return [value]
        if not value:
            raise InvalidRequest('"input" must not be empty')
        if all(isinstance(item, int) for item in value):
            items: list = [list(value)]
        elif any(isinstance(item, int) for item in value):
            raise InvalidRequest('"input" mixes token ids with texts or token arrays: send one token array per input')
        else:
            items = list(value)
        if len(items) > MAX_INPUTS:
            raise InvalidRequest(f'"input" holds {len(items)} inputs; at most {MAX_INPUTS} are embedded per request')
        for item in items:
            if isinstance(item, list) and any(token < 0 for token in item):
                raise InvalidRequest("token ids must not be negative")
        return items

    def use_base64(self) -> bool:
        if self.encoding_format in (None, "float"):
            return False
        if self.encoding_format == "base64":
            return True
        raise InvalidRequest("The format to return the embeddings in. Can be either float or base64",
                             param="encoding_format")

    def normalization(self, default: int) -> int:
        mode = default if self.embd_normalize is None else self.embd_normalize
        if mode < -1:
            raise InvalidRequest(f"embd_normalize {mode} is not -1 (none), 0 (max absolute), 1 (taxicab), "
                                 "2 (euclidean) or a p-norm above 2", param="embd_normalize")
        return mode
