"""The order of llama.cpp's samplers, named as llama-server names them.

A request (`samplers`) or the command line (`--samplers`, `--sampler-seq`) gives the
order either as names (canonical, kebab-case, without underscores, or one of the
aliases nucleus / temp / typ; case-insensitive) or as a string of one-letter codes.
Unknown names are an error here (llama-server skips them with a log line)."""

from __future__ import annotations

CANONICAL = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc",
             "temperature", "infill", "adaptive_p")
DEFAULT_ORDER = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature")
CODES = {"e": "penalties", "d": "dry", "s": "top_n_sigma", "k": "top_k", "y": "typ_p", "p": "top_p",
         "m": "min_p", "x": "xtc", "t": "temperature", "i": "infill", "a": "adaptive_p"}
MAX_SAMPLERS = 64


def _aliases() -> dict[str, str]:
    names = {name: name for name in CANONICAL}
    for name in CANONICAL:
        names.setdefault(name.replace("_", "-"), name)
        names.setdefault(name.replace("_", ""), name)
    names.update(nucleus="top_p", temp="temperature", typ="typ_p")
    return names


ALIASES = _aliases()


def parse_sampler_order(value: str | list[str]) -> tuple[str, ...]:
    """Canonical sampler names in the order given; ValueError names what is unknown."""
    if isinstance(value, str):
        unknown = sorted({c for c in value if c not in CODES})
        if unknown:
            raise ValueError(f"unknown sampler code(s) {', '.join(map(repr, unknown))}; "
                             f"codes: {''.join(CODES)}")
        order = [CODES[c] for c in value]
    else:
        unknown = [name for name in value if name.lower() not in ALIASES]
        if unknown:
            raise ValueError(f"unknown sampler name(s) {', '.join(map(repr, unknown))}; "
                             f"names: {', '.join(CANONICAL)}")
        order = [ALIASES[name.lower()] for name in value]
    if len(order) > MAX_SAMPLERS:
        raise ValueError(f"at most {MAX_SAMPLERS} samplers")
    return tuple(order)
