"""A text log line stays one line: control characters in a message (what a client sent,
logged as an argument) are written as escapes (observability/log_setup.py)."""

from __future__ import annotations

import logging

from mlxcel.observability.log_setup import ColoredFormatter, LineFormatter, one_line


def test_one_line_escapes_control_characters_but_tabs():
    assert one_line("a\nb\r\nc\x1b[2J\td\x00\x7f\x85\u2028é") == "a\\nb\\r\\nc\\x1b[2J\td\\x00\\x7f\\x85\\u2028é"


def _record(message: str, *args) -> logging.LogRecord:
    return logging.LogRecord("mlxcel.server", logging.WARNING, __file__, 1, message, args, None)


def test_a_forged_line_in_an_argument_stays_on_its_line():
    forged = "x\n2026-01-01 00:00:00,000 ERROR mlxcel: forged\x1b[2J"
    for formatter in (LineFormatter("%(levelname)s %(name)s: %(message)s"),
                      ColoredFormatter("%(levelname)s %(name)s: %(message)s")):
        line = formatter.format(_record("request %s: accepted but ignored fields: %s", "r1", forged))
        assert "\n" not in line and "\x1b[2J" not in line
        assert line.endswith("ignored fields: x\\n2026-01-01 00:00:00,000 ERROR mlxcel: forged\\x1b[2J")
