"""The rerank request as every client sends it: Jina/Cohere (`query`, `documents`,
`top_n`, `return_documents`) and TEI (`query`, `texts`, `raw_scores`, `return_text`,
`truncate`). Checked here with llama-server's messages, before any work."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from mlxcel.turn.errors import InvalidRequest

MAX_DOCUMENTS = 4096


class RerankRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: Any = None
    query: Any = None
    documents: Any = None
    texts: Any = None
    top_n: Any = None
    return_documents: Any = False
    return_text: Any = False
    raw_scores: Any = None  # TEI: false applies the sigmoid to a cross-encoder's logits; absent: raw, as llama-server
    truncate: Any = False

    @property
    def is_tei(self) -> bool:
        """TEI's bare array answers a body that has `texts` (llama-server's test)."""
        return "texts" in self.model_fields_set

    def checked_query(self) -> str:
        if "query" not in self.model_fields_set:
            raise InvalidRequest('"query" must be provided')
        if not isinstance(self.query, str):
            raise InvalidRequest('"query" must be a string')
        return self.query

    def checked_documents(self) -> list[str]:
        """`documents` (or `texts`): strings, or Cohere/Jina objects with a `text`."""
        field = "texts" if self.is_tei and self.documents is None else "documents"
        raw = self.texts if field == "texts" else self.documents
        if not isinstance(raw, list) or not raw:
            raise InvalidRequest(f'"{field}" must be a non-empty string array')
        if len(raw) > MAX_DOCUMENTS:
            raise InvalidRequest(f'"{field}" has {len(raw)} entries; at most {MAX_DOCUMENTS} are accepted')
        texts = []
        for n, item in enumerate(raw):
            if isinstance(item, dict) and isinstance(item.get("text"), str):
                item = item["text"]
            if not isinstance(item, str):
                raise InvalidRequest(f'"{field}" must be a non-empty string array ({field}[{n}] is not a string)')
            texts.append(item)
        return texts

    def checked_top_n(self) -> int | None:
        if self.top_n is None:
            return None
        if isinstance(self.top_n, bool) or not isinstance(self.top_n, int) or self.top_n < 0:
            raise InvalidRequest('"top_n" must be a non-negative integer')
        return self.top_n

    def flag(self, name: str) -> bool:
        value = getattr(self, name)
        if value is not None and not isinstance(value, bool):
            raise InvalidRequest(f'"{name}" must be a boolean')
        return bool(value)

    def activates_scores(self) -> bool:
        """TEI's normalised scores: only when `raw_scores: false` is sent."""
        return self.raw_scores is not None and not self.flag("raw_scores")
