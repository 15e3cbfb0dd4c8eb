"""`mlxcel serve`'s command line: llama-server's flags that mlxcel does not implement
split off (warned about, or refused when they would change what is served), the rest
parsed into a ServerConfig."""

from __future__ import annotations

import argparse
import os
import re

from mlxcel.cli.flag_policy import REFUSED, REMOVED_ENV, TUNING_ENV, TUNING_NOTES, UNSERVABLE, refusal
from mlxcel.cli.llama_server_flags import DEPRECATED, LLAMA_SERVER_FLAGS, REMOVED
from mlxcel.cli.serve_config import build_config
from mlxcel.cli.serve_options import add_serve_options, implemented_flags
from mlxcel.cli.usage import OneLineParser, UsageError
from mlxcel.config import ServerConfig

ROUTER_FLAGS = {"--models-max", "--models-autoload", "--no-models-autoload"}

_NUMBER = re.compile(r"-\d+(\.\d*)?|-\.\d+")


def _is_value(word: str) -> bool:
    """Whether a word after a flag is its value: anything but another flag (a negative
    number such as `--prio -1` is a value)."""
    return not word.startswith("-") or _NUMBER.fullmatch(word) is not None


def _dashed(arg: str, known: set[str]) -> str:
    """llama-server reads `--ctx_size` as `--ctx-size`: a long flag's underscores become
    dashes, where that names a flag (a value that merely starts with `--` is left alone)."""
    if not arg.startswith("--") or "_" not in arg.split("=", 1)[0]:
        return arg
    name, sep, value = arg.partition("=")
    dashed = name.replace("_", "-")
    return dashed + sep + value if dashed in known and name not in known else arg


def split_llama_server_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """Separate llama-server flags mlxcel does not implement (returned second, with
    their values dropped) from everything else."""
    ours = implemented_flags()
    known = ours | LLAMA_SERVER_FLAGS.keys() | REFUSED.keys() | UNSERVABLE.keys() | REMOVED.keys()
    kept: list[str] = []
    ignored: list[str] = []
    i = 0
    while i < len(argv):
        arg = _dashed(argv[i], known)
        name = arg.split("=", 1)[0]
        if name not in ours and name in REFUSED:
            raise UsageError(refusal(name))
        if name in UNSERVABLE:
            raise UsageError(f"{name}: {UNSERVABLE[name]}")
        if name in REMOVED:
            raise UsageError(f"{name}: the argument has been removed from llama-server; {REMOVED[name]}")
        if name not in ours and name in LLAMA_SERVER_FLAGS:
            note = DEPRECATED.get(name) or TUNING_NOTES.get(name)
            ignored.append(f"{name} ({note})" if note else name)
            if "=" not in arg:
                n_values = LLAMA_SERVER_FLAGS[name]
                # an optional value: skip the next word only when it is not a flag
                while n_values and i + 1 < len(argv) and _is_value(argv[i + 1]):
                    i += 1
                    n_values -= 1
        else:
            kept.append(arg)
        i += 1
    return kept, ignored


def serve_parser(prog: str) -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=prog,
        description="Serve a GGUF model over HTTP with the OpenAI, Anthropic and llama-server APIs.",
        epilog="Other llama-server flags are accepted and ignored with a warning.",
    )
    add_serve_options(parser)
    from mlxcel import __version__

    parser.add_argument("--version", action="version", version=f"mlxcel {__version__}")
    parser.add_argument("--usage", action="help", help="show this help message and exit (as -h)")
    parser.add_argument("--completion-bash", action="store_true",
                        help="print a bash completion script for these flags (source it), and exit")
    parser.add_argument("--list-devices", action="store_true",
                        help="print the devices llama.cpp can offload to, and exit")
    parser.add_argument("-cl", "--cache-list", action="store_true",
                        help="print the models `mlxcel pull` fetched, and exit")
    return parser


def _tuning_variables() -> list[str]:
    """The set variables of llama-server's tuning flags, named as the flags are; a removed
    flag's variable is refused, as llama-server refuses it."""
    for variable, flag in REMOVED_ENV.items():
        if variable in os.environ:
            raise UsageError(f"environment variable {variable}: the argument has been removed from llama-server; "
                             f"{REMOVED[flag]}")
    return [f"{variable} ({flag})" for variable, flag in TUNING_ENV.items() if variable in os.environ]


def parse_serve_args(argv: list[str], prog: str = "mlxcel serve") -> ServerConfig:
    kept, ignored = split_llama_server_flags(argv)
    ignored += _tuning_variables()
    parser = serve_parser(prog)
    args = parser.parse_args(kept)
    given = {arg.split("=", 1)[0] for arg in kept}
    templates = [name for name in (arg.split("=", 1)[0] for arg in kept)
                 if name in ("--chat-template", "--chat-template-file")]
    args.last_template_flag = templates[-1] if templates else None
    if args.config_file is not None and (args.models_dir is not None or args.models_preset is not None):
        raise UsageError("--config and --models-dir / --models-preset each say which models to serve: use one of them")
    if args.config_file is not None or args.models_dir is not None or args.models_preset is not None:
        if given & {"-m", "--model"}:
            flag = "--config serves the models its file lists" if args.config_file else \
                "--models-dir / --models-preset serve the models they name"
            raise UsageError(f"{flag}: drop -m/--model")
        args.explicit_flags = given
    else:  # one model: the router's flags have nothing to act on
        ignored += sorted(given & ROUTER_FLAGS)
    return build_config(args, ignored)
