"""llama-server's logging flags: --log-file, --log-disable, --log-jsonl, --log-colors,
--log-prefix, --log-timestamps and -lv/--log-verbosity (their LLAMA_ARG_* variables too). What they set is
applied by mlxcel/observability/log_setup.py."""

from __future__ import annotations

import argparse
import os

from mlxcel.cli.usage import UsageError
from mlxcel.config import LogSettings

_TRUTHY = {"on", "enabled", "true", "1"}
_FALSEY = {"off", "disabled", "false", "0"}
_AUTO = {"auto", "-1"}
_SWITCHES = [  # (on, off, dest, default, variable, help)
    (("--log-disable",), (), "log_disable", False, None, "log nothing"),
    (("--log-jsonl",), ("--no-log-jsonl",), "log_jsonl", False, "LLAMA_ARG_LOG_JSONL",
     "log one JSON object a line ({type, time, level, msg, logger}) to stdout, without colors"),
    (("--log-prefix",), ("--no-log-prefix",), "log_prefix", True, "LLAMA_ARG_LOG_PREFIX",
     "start each log line with its time, level and logger"),
    (("--log-timestamps",), ("--no-log-timestamps",), "log_timestamps", True, "LLAMA_ARG_LOG_TIMESTAMPS",
     "put the time in each log line's prefix"),
]
VERBOSITY_FLAGS = ("-lv", "--verbosity", "--log-verbosity")
LOG_FLAGS = {"--log-file", "--log-colors", *VERBOSITY_FLAGS} | {f for on, off, *_ in _SWITCHES for f in on + off}


def _colors(text: str) -> str:
    value = text.strip().lower()
    if value in _TRUTHY:
        return "on"
    if value in _FALSEY:
        return "off"
    if value in _AUTO:
        return "auto"
    raise argparse.ArgumentTypeError(f"unknown value for --log-colors: {text!r} (on, off or auto)")


def _verbosity(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid log verbosity: {text!r} (an integer: 1 errors, 2 warnings, "
                                         "3 info, 4 and up debug)") from None


def _switch_default(variable: str | None, default: bool) -> bool:
    if not variable or variable not in os.environ:
        return default
    text = os.environ[variable].strip().lower()
    if text in _TRUTHY:
        return True
    if text in _FALSEY:
        return False
    raise UsageError(f"environment variable {variable}: invalid boolean {os.environ[variable]!r}")


def _env_default(variable: str, parse, default):
    """A variable's value read as its flag's would be: a bad one is a one-line error."""
    if variable not in os.environ:
        return default
    try:
        return parse(os.environ[variable])
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"environment variable {variable}: {exc}") from None


def add_log_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-file", dest="log_file", default=os.environ.get("LLAMA_ARG_LOG_FILE"),
                        metavar="FNAME", help="also log to this file (appended) [env: LLAMA_ARG_LOG_FILE]")
    parser.add_argument("--log-colors", dest="log_colors", type=_colors,
                        default=_env_default("LLAMA_ARG_LOG_COLORS", _colors, "auto"), metavar="on|off|auto",
                        help="color each log line's level; auto: where stderr is a terminal "
                             "[env: LLAMA_ARG_LOG_COLORS]")
    parser.add_argument(*VERBOSITY_FLAGS, dest="log_verbosity", type=_verbosity, metavar="N",
                        default=_env_default("LLAMA_ARG_LOG_VERBOSITY", _verbosity, None),
                        help="log only lines up to this verbosity, as llama-server's: 0 or 1 errors, 2 warnings too, "
                             "3 info too (the default), 4 and up debug detail too [env: LLAMA_ARG_LOG_VERBOSITY]")
    for on, off, dest, default, variable, help_text in _SWITCHES:
        suffix = f" [env: {variable}]" if variable else ""
        parser.add_argument(*on, dest=dest, action="store_true", default=_switch_default(variable, default),
                            help=help_text + suffix)
        if off:
            parser.add_argument(*off, dest=dest, action="store_false", help=f"do not {help_text}")


def log_settings(args: argparse.Namespace) -> LogSettings:
    """The settings, the log file opened once to check that it can be (an error names it)."""
    path = args.log_file
    if path:
        path = os.path.abspath(os.path.expanduser(path))
        try:
            with open(path, "a", encoding="utf-8"):
                pass
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"--log-file: cannot write {path}: {exc.strerror or exc}") from None
    return LogSettings(file=path or None, disabled=args.log_disable, jsonl=args.log_jsonl, colors=args.log_colors,
                       prefix=args.log_prefix, timestamps=args.log_timestamps, verbosity=args.log_verbosity)
