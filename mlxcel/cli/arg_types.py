"""argparse value types shared by the command-line modules."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any


def ranged(kind: Callable[[str], Any], lo: float | None = None, hi: float | None = None, what: str = ""):
    """A number parser that refuses values outside [lo, hi] and non-finite floats."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value: {text!r}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            bounds = what or (f"between {lo} and {hi}" if hi is not None else f">= {lo}")
            raise argparse.ArgumentTypeError(f"{text} is out of range ({bounds})")
        return value

    parse.__name__ = kind.__name__
    return parse
