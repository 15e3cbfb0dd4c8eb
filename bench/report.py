"""Medians, pairwise ratios, the results table and the JSON dump."""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bare_worker import LAYOUTS, STREAM_SCENARIOS
from scenarios import TARGETS, Measurement

BARE_TARGET = 0.95  # every stream-count figure against the bare loop (issue 18)
INTERVAL_LEVEL = 0.95  # the confidence of the interval given for each median ratio


@dataclass
class Round:
    """One round of one scenario: a measurement on each server, taken back to back."""
    scenario: str
    round: int
    mlxcel: Measurement
    reference: Measurement
    bare: dict[str, float] | None = None   # bench/bare_loop.py this round, by KV layout


@dataclass
class Row:
    scenario: str
    metric: str
    mlxcel: float
    reference: float
    ratio: float               # median over rounds of mlxcel / llama-server
    n: int
    spread: tuple[float, float] = (math.nan, math.nan)  # the lowest and highest per-round ratio
    interval: tuple[float, float, float] = (math.nan, math.nan, math.nan)  # median_interval's
    target: str = ""
    verdict: str = ""          # "ok", "MISS" or "", and "~" when the median's interval holds the target
    bare: dict[str, float] = field(default_factory=dict)         # median loop figure by KV layout
    bare_ratio: dict[str, float] = field(default_factory=dict)   # median of per-round mlxcel / loop
    bare_interval: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # their median's
    reference_bare_ratio: float = math.nan                        # llama-server / the split-KV loop


def _median(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else float("nan")


def median_interval(values: list[float], level: float = INTERVAL_LEVEL) -> tuple[float, float, float]:
    """A confidence interval for the median of what `values` sample, assuming nothing of
    their distribution: the order statistics x(k) and x(n+1-k), whose coverage is
    1 - 2 P(Binomial(n, 1/2) < k), with the largest k that keeps it at least `level`.
    Returns (low, high, coverage). Below six values no k reaches 95 %: the whole range
    is returned with its own coverage (5 rounds: 93.75 %)."""
    xs = sorted(x for x in values if not math.isnan(x))
    n = len(xs)
    if n == 0:
        return math.nan, math.nan, math.nan

    def coverage(k: int) -> float:
        below = sum(math.comb(n, i) for i in range(k)) / 2 ** n  # P(Binomial(n, 1/2) < k)
        return 1 - 2 * below

    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= level:
        k += 1
    return xs[k - 1], xs[n - k], coverage(k)


def summarize(rounds: list[Round],
              targets: dict[tuple[str, str], tuple[str, float]] | None = None) -> list[Row]:
    """One row per (scenario, metric); `targets` (default: run.py's) marks each ratio."""
    targets = TARGETS if targets is None else targets
    rows: list[Row] = []
    scenarios = list(dict.fromkeys(r.scenario for r in rounds))
    for name in scenarios:
        mine = [r for r in rounds if r.scenario == name]
        metrics = list(dict.fromkeys(m for r in mine for m in r.reference.metrics))
        for metric in metrics:
            pairs = [(r.mlxcel.metrics.get(metric, math.nan),
                      r.reference.metrics.get(metric, math.nan)) for r in mine]
            ratios = [a / b if b else math.nan for a, b in pairs]
            row = Row(name, metric, _median([a for a, _ in pairs]),
                      _median([b for _, b in pairs]), _median(ratios), len(pairs), _spread(ratios),
                      median_interval(ratios))
            if (name, metric) in targets:
                op, bound = targets[(name, metric)]
                row.target = f"{op} {bound:g}"
                if not math.isnan(row.ratio):
                    ok = row.ratio >= bound if op == ">=" else row.ratio <= bound
                    row.verdict = "ok" if ok else "MISS"
                    lo, hi, _ = row.interval
                    if lo < bound < hi:  # the median may lie on either side: within the host's noise
                        row.verdict += " ~"
            if STREAM_SCENARIOS.get(name, (None,) * 4)[3] == metric:
                _add_bare(row, mine, metric)
            rows.append(row)
    return rows


def _add_bare(row: Row, rounds: list[Round], metric: str) -> None:
    for layout in LAYOUTS:
        pairs = [(r.mlxcel.metrics.get(metric, math.nan), r.bare[layout])
                 for r in rounds if r.bare and layout in r.bare]
        if pairs:
            ratios = [a / b if b else math.nan for a, b in pairs]
            row.bare[layout] = _median([b for _, b in pairs])
            row.bare_ratio[layout] = _median(ratios)
            row.bare_interval[layout] = median_interval(ratios)
    row.reference_bare_ratio = _median([r.reference.metrics.get(metric, math.nan) / r.bare["split"]
                                        for r in rounds if r.bare and r.bare.get("split")])


def _spread(ratios: list[float]) -> tuple[float, float]:
    xs = [x for x in ratios if not math.isnan(x)]
    return (min(xs), max(xs)) if xs else (math.nan, math.nan)


def _fmt(x: float) -> str:
    if math.isnan(x):
        return "-"
    return f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"


def table(rows: list[Row]) -> str:
    header = ("scenario", "metric", "mlxcel", "llama-server", "ratio", "rounds' range", "median's interval",
              "target", "check", "bare split", "/bare", "bare unified", "/bare", "llama-server/bare split")
    body = [(r.scenario, r.metric, _fmt(r.mlxcel), _fmt(r.reference), _ratio(r.ratio),
             f"{_ratio(r.spread[0])}-{_ratio(r.spread[1])}" if r.n > 1 else "", _interval(r) if r.n > 1 else "",
             r.target, r.verdict, *_bare_cells(r)) for r in rows]
    widths = [max(len(str(line[i])) for line in [header, *body]) for i in range(len(header))]
    right = {2, 3, 4, 5, 6, 9, 10, 11, 12, 13}

    def fmt_line(line: tuple) -> str:
        cells = [str(c).rjust(w) if i in right else str(c).ljust(w)
                 for i, (c, w) in enumerate(zip(line, widths))]
        return "  ".join(cells).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([fmt_line(header), sep, *map(fmt_line, body)])


def _interval(row: Row) -> str:
    lo, hi, coverage = row.interval
    return f"{_ratio(lo)}-{_ratio(hi)} ({coverage:.0%})"


def _ratio(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.3f}"


def _bare_cells(row: Row) -> list[str]:
    cells = []
    for layout in LAYOUTS:
        if layout not in row.bare:
            cells += ["", ""]
            continue
        ratio = row.bare_ratio[layout]
        miss = "" if math.isnan(ratio) or ratio >= BARE_TARGET else " MISS"
        lo, hi, _ = row.bare_interval.get(layout, (math.nan, math.nan, math.nan))
        if lo < BARE_TARGET < hi:
            miss += " ~"
        cells += [_fmt(row.bare[layout]), _ratio(ratio) + miss]
    return [*cells, _ratio(row.reference_bare_ratio) if row.bare else ""]


def write_json(path: Path, config: dict, servers: dict, rounds: list[Round],
               rows: list[Row], **extra) -> None:
    data = {"config": config, "servers": servers,
            "summary": [asdict(r) for r in rows],
            "rounds": [asdict(r) for r in rounds], **extra}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=str) + "\n")


def clean_rounds(rounds: list[Round], max_other_load: float) -> tuple[list[Round], int]:
    """The rounds in which neither server shared the cores with other processes beyond
    `max_other_load` (Measurement.raw["other_load"]), and how many were left out; a
    scenario with no such round keeps all of its rounds."""
    def clean(r: Round) -> bool:
        return all(not m.raw.get("other_load", 0.0) > max_other_load for m in (r.mlxcel, r.reference))

    kept = [r for r in rounds if clean(r) or not any(clean(o) for o in rounds if o.scenario == r.scenario)]
    return kept, len(rounds) - len(kept)


def args_config(args) -> dict:
    """A bench's command-line arguments as JSON-able values (paths as strings)."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
