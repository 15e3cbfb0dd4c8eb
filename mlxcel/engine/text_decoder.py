"""Token bytes to text, holding back UTF-8 sequences split across tokens."""

from __future__ import annotations

import codecs


class IncrementalTextDecoder:
    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes) -> str:
        return self._decoder.decode(data, final=False)

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)
