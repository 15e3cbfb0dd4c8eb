"""llama-server's two line-based stops, for code completion (FIM) clients:

- `n_indent`: once the output has a newline, every later line must be indented by at
  least n_indent spaces or tabs; the first line that is not ends the generation
  there, its text cut before its first non-blank character.
- `t_max_predict_ms`: once the output has a newline, a newline generated after that
  much time since the first token ends the generation.

Both end with a "limit" stop. Kept per slot only when the request sets one."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LineLimits:
    n_indent: int = 0
    t_max_predict_ms: float = 0.0
    _after_newline: bool = False  # a newline has been generated
    _line_open: bool = False  # the current line (after a newline) has no non-blank character yet
    _indent: int = 0  # blanks at the start of the current line so far

    @classmethod
    def for_request(cls, n_indent: int, t_max_predict_ms: float) -> LineLimits | None:
        return cls(n_indent, t_max_predict_ms) if n_indent > 0 or t_max_predict_ms > 0 else None

    def feed(self, text: str, elapsed_ms: float) -> tuple[str, bool]:
        """The part of `text` to emit and whether the generation stops after it."""
        for i, char in enumerate(text):
            if char == "\n":
                self._after_newline = self._line_open = True
                self._indent = 0
            elif self._line_open:
                if char in " \t":
                    self._indent += 1
                else:
                    self._line_open = False
                    if 0 < self.n_indent and self._indent < self.n_indent:
                        return text[:i], True
        if "\n" in text and 0 < self.t_max_predict_ms < elapsed_ms:
            return text, True
        return text, False
