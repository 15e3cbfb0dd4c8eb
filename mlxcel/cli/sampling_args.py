"""The server's default sampling settings, from llama-server's sampling flags.

Every flag here changes what is generated, so each one is implemented (none is in the
accepted-and-ignored set). A request's own fields override these defaults."""

from __future__ import annotations

import argparse
import math
from typing import Any

from mlxcel.cli.arg_types import ranged as _ranged
from mlxcel.engine.sampler_order import parse_sampler_order
from mlxcel.engine.sampling import DEFAULT_DRY_BREAKERS, DEFAULT_SEED, SamplingParams
from mlxcel.turn.sampling_fields import INT32_MAX


def _order(split):
    def parse(text: str) -> tuple[str, ...]:
        try:
            return parse_sampler_order(split(text))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = "sampler order"
    return parse


def _logit_bias(text: str) -> tuple[int, float]:
    """llama-server's TOKEN_ID(+/-)BIAS, e.g. 15043+1 or 2-inf."""
    for i in range(1, len(text)):
        if text[i] in "+-":
            try:
                token, bias = int(text[:i]), float(text[i:])
            except ValueError:
                break
            if token < 0 or math.isnan(bias):
                break
            return token, bias
    raise argparse.ArgumentTypeError(f"invalid logit bias {text!r} (expected TOKEN_ID(+/-)BIAS, e.g. 15043+1)")


def _temperature(text: str) -> float:
    """llama-server's --temp: any finite number, a negative one taken as 0 (greedy)."""
    return max(_ranged(float)(text), 0.0)


_temperature.__name__ = "float"

# (flags, dest, type, default, environment variable, help): the same shape as serve_args'
SAMPLING_OPTIONS: list[tuple[tuple[str, ...], str, Any, Any, str, str]] = [
    (("--temp", "--temperature"), "temp", _temperature, 0.8, "LLAMA_ARG_TEMPERATURE", "default temperature (0: greedy)"),
    (("--top-k",), "top_k", _ranged(int, 0, INT32_MAX), 40, "LLAMA_ARG_TOP_K", "default top-k (0: disabled)"),
    (("--top-p",), "top_p", _ranged(float, 0.0, 1.0), 0.95, "LLAMA_ARG_TOP_P", "default top-p (1.0: disabled)"),
    (("--min-p",), "min_p", _ranged(float, 0.0, 1.0), 0.05, "LLAMA_ARG_MIN_P", "default min-p (0.0: disabled)"),
    (("--typical", "--typical-p"), "typical_p", _ranged(float, 0.0, 1.0), 1.0, "LLAMA_ARG_TYPICAL_P",
     "default locally typical sampling p (1.0: disabled)"),
    (("--top-n-sigma", "--top-nsigma"), "top_n_sigma", _ranged(float, -1.0, 100.0), -1.0, "LLAMA_ARG_TOP_N_SIGMA",
     "default top-n-sigma (-1: disabled)"),
    (("--xtc-probability",), "xtc_probability", _ranged(float, 0.0, 1.0), 0.0, "LLAMA_ARG_XTC_PROBABILITY",
     "default XTC probability (0: disabled)"),
    (("--xtc-threshold",), "xtc_threshold", _ranged(float, 0.0, 1.0), 0.1, "LLAMA_ARG_XTC_THRESHOLD",
     "default XTC threshold"),
    (("--repeat-penalty",), "repeat_penalty", _ranged(float, 2.0**-126, 100.0), 1.0, "LLAMA_ARG_REPEAT_PENALTY",
     "default repetition penalty (1.0: disabled)"),
    (("--repeat-last-n",), "repeat_last_n", _ranged(int, -1, INT32_MAX), 64, "LLAMA_ARG_REPEAT_LAST_N",
     "default tokens the penalties look back over (0: disabled, -1: the context)"),
    (("--presence-penalty",), "presence_penalty", _ranged(float, -2.0, 2.0), 0.0, "LLAMA_ARG_PRESENCE_PENALTY",
     "default presence penalty"),
    (("--frequency-penalty",), "frequency_penalty", _ranged(float, -2.0, 2.0), 0.0, "LLAMA_ARG_FREQUENCY_PENALTY",
     "default frequency penalty"),
    (("--dry-multiplier",), "dry_multiplier", _ranged(float, 0.0, 100.0), 0.0, "LLAMA_ARG_DRY_MULTIPLIER",
     "default DRY multiplier (0: disabled)"),
    (("--dry-base",), "dry_base", _ranged(float, 1.0, 100.0), 1.75, "LLAMA_ARG_DRY_BASE", "default DRY base"),
    (("--dry-allowed-length",), "dry_allowed_length", _ranged(int, 0, INT32_MAX), 2, "LLAMA_ARG_DRY_ALLOWED_LENGTH",
     "default DRY allowed length"),
    (("--dry-penalty-last-n",), "dry_penalty_last_n", _ranged(int, -1, INT32_MAX), 0, "LLAMA_ARG_DRY_PENALTY_LAST_N",
     "default tokens DRY scans (0 or -1: the context)"),
    (("--dynatemp-range",), "dynatemp_range", _ranged(float, 0.0, 100.0), 0.0, "LLAMA_ARG_DYNATEMP_RANGE",
     "default dynamic temperature range (0: disabled)"),
    (("--dynatemp-exp",), "dynatemp_exponent", _ranged(float, 0.0, 100.0), 1.0, "LLAMA_ARG_DYNATEMP_EXP",
     "default dynamic temperature exponent"),
    (("--mirostat",), "mirostat", _ranged(int, 0, 2), 0, "LLAMA_ARG_MIROSTAT",
     "default Mirostat version (0: off, 1: Mirostat, 2: Mirostat 2.0)"),
    (("--mirostat-lr",), "mirostat_eta", _ranged(float, 0.0, 1.0), 0.1, "LLAMA_ARG_MIROSTAT_LR",
     "default Mirostat learning rate (eta)"),
    (("--mirostat-ent",), "mirostat_tau", _ranged(float, 0.0, 100.0), 5.0, "LLAMA_ARG_MIROSTAT_ENT",
     "default Mirostat target entropy (tau)"),
    (("--adaptive-target",), "adaptive_target", _ranged(float, -1.0, 1.0), -1.0, "LLAMA_ARG_ADAPTIVE_TARGET",
     "adaptive-p target probability (negative: disabled)"),
    (("--adaptive-decay",), "adaptive_decay", _ranged(float, 0.0, 0.99), 0.9, "LLAMA_ARG_ADAPTIVE_DECAY",
     "adaptive-p decay"),
    (("--samplers",), "samplers", _order(lambda text: [n for n in text.split(";") if n]), None, "LLAMA_ARG_SAMPLERS",
     "sampler order, names separated by ';' (default: penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature)"),
    (("--sampler-seq", "--sampling-seq"), "sampler_seq", _order(str), None, "LLAMA_ARG_SAMPLER_SEQ",
     "sampler order as one-letter codes (default: edskypmxt)"),
    (("-s", "--seed"), "seed", _ranged(int, -1, 2**64 - 1), -1, "LLAMA_ARG_SEED", "default sampling seed (-1: random)"),
]

# repeatable flags: (flags, dest, type, help)
SAMPLING_LISTS: list[tuple[tuple[str, ...], str, Any, str]] = [
    (("-l", "--logit-bias"), "logit_bias", _logit_bias, "default logit bias TOKEN_ID(+/-)BIAS (repeatable)"),
    (("-r", "--reverse-prompt"), "reverse_prompt", str, "default stop string, used when a request sends none (repeatable)"),
    (("--dry-sequence-breaker",), "dry_sequence_breaker", str,
     "DRY sequence breaker (repeatable; replaces the defaults; 'none' for none)"),
]

SAMPLING_SWITCHES = [
    (("--ignore-eos",), (), "ignore_eos", False, "LLAMA_ARG_IGNORE_EOS", "ignore end-of-generation tokens by default"),
]


ESCAPE_FLAGS = {"-e", "--escape", "--no-escape"}

_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "'": "'", '"': '"', "\\": "\\"}
_HEX = set("0123456789abcdefABCDEF")


def process_escapes(text: str) -> str:
    """llama-server's escape processing of -r and --dry-sequence-breaker: \\n, \\r, \\t,
    \\', \\", \\\\ and \\xHH become the characters they name; any other backslash stays."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        code = text[i + 1]
        if code in _ESCAPES:
            out.append(_ESCAPES[code])
            i += 2
        elif code == "x" and len(text) > i + 3 and text[i + 2] in _HEX and text[i + 3] in _HEX:
            out.append(chr(int(text[i + 2:i + 4], 16)))
            i += 4
        else:
            out.append("\\" + code)
            i += 2
    return "".join(out)


def add_sampling_lists(parser: argparse.ArgumentParser) -> None:
    for flags, dest, kind, help_text in SAMPLING_LISTS:
        parser.add_argument(*flags, dest=dest, type=kind, action="append", default=None, help=help_text)
    parser.add_argument("-e", "--escape", dest="escape", action="store_true", default=True,
                        help="read escape sequences (\\n, \\t, \\xHH ...) in -r and --dry-sequence-breaker, as "
                             "llama-server does (default)")
    parser.add_argument("--no-escape", dest="escape", action="store_false",
                        help="take -r and --dry-sequence-breaker literally")


def reverse_prompts(args: argparse.Namespace) -> list[str]:
    """-r's stop strings, escapes read unless --no-escape."""
    return [process_escapes(s) if args.escape else s for s in args.reverse_prompt or [] if s]


def sampling_defaults(args: argparse.Namespace) -> SamplingParams:
    """The server-wide SamplingParams from the parsed flags."""
    breakers = args.dry_sequence_breaker
    if breakers is None:
        dry_breakers = DEFAULT_DRY_BREAKERS
    else:
        if "none" in breakers:  # as in llama-server, "none" clears the breakers given before it
            breakers = breakers[len(breakers) - breakers[::-1].index("none"):]
        dry_breakers = tuple(process_escapes(b) if args.escape else b for b in breakers)
    # an empty order is llama-server's too: no sampler but the final draw ("--samplers ''")
    order = args.samplers if args.samplers is not None else args.sampler_seq
    extra = {"samplers": order} if order is not None else {}
    return SamplingParams(
        temperature=args.temp,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        typical_p=args.typical_p,
        top_n_sigma=args.top_n_sigma,
        xtc_probability=args.xtc_probability,
        xtc_threshold=args.xtc_threshold,
        repeat_penalty=args.repeat_penalty,
        repeat_last_n=args.repeat_last_n,
        frequency_penalty=args.frequency_penalty,
        presence_penalty=args.presence_penalty,
        dry_multiplier=args.dry_multiplier,
        dry_base=args.dry_base,
        dry_allowed_length=args.dry_allowed_length,
        dry_penalty_last_n=args.dry_penalty_last_n,
        dry_sequence_breakers=dry_breakers,
        dynatemp_range=args.dynatemp_range,
        dynatemp_exponent=args.dynatemp_exponent,
        mirostat=args.mirostat,
        mirostat_eta=args.mirostat_eta,
        mirostat_tau=args.mirostat_tau,
        adaptive_target=args.adaptive_target,
        adaptive_decay=args.adaptive_decay,
        logit_bias={token: (-math.inf if bias <= -100 else bias) for token, bias in (args.logit_bias or [])},
        seed=DEFAULT_SEED if args.seed in (-1, DEFAULT_SEED) else args.seed,
        **extra,
    )
