"""The process's logging, as --log-* set it (mlxcel/cli/log_args.py): lines on stderr
(on stdout as JSON objects with --log-jsonl), also appended to --log-file, each with
llama-server's choices of prefix, timestamps and colors; nothing with --log-disable."""

from __future__ import annotations

import json
import logging
import os
import sys
import time

from mlxcel.config import LogSettings

_COLORS = {"DEBUG": "\033[33m", "INFO": "\033[32m", "WARNING": "\033[35m", "ERROR": "\033[31m",
           "CRITICAL": "\033[31m"}  # llama.cpp's: yellow, green, magenta, red
_RESET = "\033[0m"
_LEVELS = {"DEBUG": "debug", "INFO": "info", "WARNING": "warn", "ERROR": "error", "CRITICAL": "error"}
_STARTED = time.time()  # the process's start, near enough: JSONL times count from it, as llama.cpp's


class JsonLinesFormatter(logging.Formatter):
    """llama.cpp's JSONL line: type, microseconds since start, level and message; and the
    logger's name."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        return json.dumps({"type": "log", "time": int((record.created - _STARTED) * 1e6),
                           "level": _LEVELS.get(record.levelname, "none"), "msg": message, "logger": record.name},
                          ensure_ascii=False)


# control characters (C0 but tab, DEL, C1) and the Unicode line separators, as escapes
_ESCAPES = {code: repr(chr(code))[1:-1] for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))
            if chr(code) != "\t"} | {0x2028: "\\u2028", 0x2029: "\\u2029"}


def one_line(text: str) -> str:
    """`text` with its control characters written as escapes (a newline as \\n, ESC as
    \\x1b): what a client sent (a field's name, a path) cannot start a forged line or
    drive the terminal."""
    return text.translate(_ESCAPES)


class LineFormatter(logging.Formatter):
    """A text line: the message on one line (a traceback after it stays as Python wrote it)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = one_line(record.message)
        return super().formatMessage(record)


class ColoredFormatter(LineFormatter):
    def format(self, record: logging.LogRecord) -> str:
        color = _COLORS.get(record.levelname)
        if color is None:
            return super().format(record)
        colored = logging.makeLogRecord(record.__dict__)
        colored.levelname = f"{color}{record.levelname}{_RESET}"
        return super().format(colored)


def line_format(settings: LogSettings) -> str:
    if not settings.prefix:
        return "%(message)s"  # llama.cpp prints a time only within the prefix
    head = "%(asctime)s " if settings.timestamps else ""
    return head + "%(levelname)s %(name)s: %(message)s"


def wants_colors(settings: LogSettings, stream) -> bool:
    if settings.jsonl or settings.colors == "off":
        return False
    if settings.colors == "on":
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM") != "dumb" and "NO_COLOR" not in os.environ


def _formatter(settings: LogSettings, colored: bool) -> logging.Formatter:
    if settings.jsonl:
        return JsonLinesFormatter()
    return (ColoredFormatter if colored else LineFormatter)(line_format(settings))


def log_level(verbosity: int | None, verbose: bool) -> int:
    """llama.cpp's verbosity threshold as a logging level: 0 and 1 errors only, 2 warnings,
    3 info, 4 and above debug; unset, info (debug with -v)."""
    if verbosity is None:
        return logging.DEBUG if verbose else logging.INFO
    if verbosity <= 1:
        return logging.ERROR
    return {2: logging.WARNING, 3: logging.INFO}.get(verbosity, logging.DEBUG)


def configure_logging(settings: LogSettings, verbose: bool) -> None:
    if settings.disabled:
        logging.disable(logging.CRITICAL)
        return
    stream = sys.stdout if settings.jsonl else sys.stderr
    console = logging.StreamHandler(stream)
    console.setFormatter(_formatter(settings, wants_colors(settings, stream)))
    handlers: list[logging.Handler] = [console]
    if settings.file:
        to_file = logging.FileHandler(settings.file, encoding="utf-8")
        to_file.setFormatter(_formatter(settings, colored=False))
        handlers.append(to_file)
    logging.basicConfig(level=log_level(settings.verbosity, verbose), handlers=handlers)
