"""Loop detection: stop a generation whose tail is a short token pattern repeated.

Request fields mirror vLLM's RepetitionDetectionParams (`max_pattern_size`,
`min_pattern_size`, `min_count`). Which thresholds apply is decided by
`resolve_loop_policy`, first match wins:

1. the request: if it sets any of the three fields (an explicit
   `max_pattern_size: 0` force-disables, as does a `min_count` below 2, which vLLM
   refuses);
2. the `MLXCEL_LOOP_DETECTION` environment variable, read by the server at startup
   (`parse_loop_env` validates it there):

   * `off` (also `0`, `none`, `false`, `no`, `disabled`): detection off for every
     model, the per-family default included;
   * `on`: the Gemma 4 thresholds (20,1,4) for every model;
   * `MAX,MIN,COUNT`, three integers such as `20,1,4`: those thresholds for every
     model (`MAX` 0 is off). Spaces are ignored; an empty value counts as unset;
     anything else is an error naming the variable;
3. the model family's default: Gemma 4 is on with max=20, min=1, count=4;
4. otherwise off.

A policy is a tuple `(max_pattern_size, min_pattern_size, min_count)`, or None for off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LoopPolicy = tuple[int, int, int]

LOOP_FIELDS = ("max_pattern_size", "min_pattern_size", "min_count")
LOOP_ENV_VAR = "MLXCEL_LOOP_DETECTION"
GEMMA4_LOOP_POLICY: LoopPolicy = (20, 1, 4)
FAMILY_LOOP_DEFAULTS: dict[str, LoopPolicy] = {"gemma4": GEMMA4_LOOP_POLICY}

_ENV_OFF = frozenset({"off", "0", "none", "false", "no", "disabled"})


class LoopDetector:
    """Watches generated tokens; `observe` says when the tail has become a loop.

    For each pattern size L it keeps the length of the current run of tokens equal
    to the token L places earlier. The tail is a pattern of size L repeated
    `min_count` times exactly when that run reaches L * (min_count - 1). Memory is a
    ring of the last `max_pattern_size` tokens; each token costs one comparison
    per pattern size.
    """

    def __init__(self, max_pattern_size: int, min_pattern_size: int, min_count: int) -> None:
        self.max_pattern_size = max_pattern_size
        self.min_pattern_size = max(1, min_pattern_size)
        self.min_count = min_count
        self.enabled = max_pattern_size > 0 and min_count >= 2 and self.min_pattern_size <= max_pattern_size
        self.pattern_size: int | None = None  # the size that matched, once one has
        self.reset()

    def reset(self) -> None:
        size = max(self.max_pattern_size, 1)
        self._ring: list[int] = [0] * size
        self._runs = [0] * (size + 1)  # indexed by pattern size
        self._seen = 0
        self.pattern_size = None

    def observe(self, token: int) -> bool:
        if not self.enabled:
            return False
        ring, runs, n = self._ring, self._runs, self._seen
        width = self.max_pattern_size
        hit = None
        for size in range(self.min_pattern_size, min(width, n) + 1):
            if ring[(n - size) % width] == token:
                runs[size] += 1
                if hit is None and runs[size] >= size * (self.min_count - 1):
                    hit = size
            else:
                runs[size] = 0
        ring[n % width] = token
        self._seen = n + 1
        if hit is not None:
            self.pattern_size = hit
            return True
        return False


def validate_loop_params(max_pattern_size: Any, min_pattern_size: Any, min_count: Any,
                         count_below_two_disables: bool = False) -> LoopPolicy:
    """Checks the three values vLLM's way; raises ValueError naming the bad field.
    Returns them as ints with `min_pattern_size` 0 read as 1. A request's `min_count`
    below 2 turns detection off (`count_below_two_disables`), as the spec has it."""
    if count_below_two_disables and isinstance(min_count, int) and not isinstance(min_count, bool) and min_count < 2:
        min_count = 0  # off, even below 0
    values = {"max_pattern_size": max_pattern_size, "min_pattern_size": min_pattern_size, "min_count": min_count}
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an integer")
        if value < 0:
            raise ValueError(f"{name} must be >= 0")
    effective_min = max(1, min_pattern_size)
    if max_pattern_size > 0:
        if effective_min > max_pattern_size:
            raise ValueError("min_pattern_size must be <= max_pattern_size")
        if min_count < 2 and not count_below_two_disables:
            raise ValueError("min_count must be >= 2")
    return max_pattern_size, effective_min, min_count


def parse_loop_env(value: str) -> LoopPolicy | None:
    """The policy `MLXCEL_LOOP_DETECTION` sets (see the module docstring)."""
    text = value.strip().lower().replace(" ", "")
    if text in _ENV_OFF:
        return None
    if text == "on":
        return GEMMA4_LOOP_POLICY
    parts = text.split(",")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        numbers = []
    if len(numbers) != 3:
        raise ValueError(f"{LOOP_ENV_VAR} must be 'off', 'on' or 'max,min,count' such as '20,1,4', got {value!r}")
    try:
        policy = validate_loop_params(*numbers)
    except ValueError as exc:
        raise ValueError(f"{LOOP_ENV_VAR}: {exc}") from None
    return policy if policy[0] > 0 else None


def family_loop_default(model_family: str | None) -> LoopPolicy | None:
    """The per-family default: `gemma4`, `gemma-4`, `Gemma4_text` ... all match."""
    if not model_family:
        return None
    key = model_family.lower().replace("-", "").replace("_", "").replace(" ", "")
    for family, policy in FAMILY_LOOP_DEFAULTS.items():
        if key.startswith(family):
            return policy
    return None


def resolve_loop_policy(
    request_fields: Mapping[str, Any],
    env_value: str | None,
    model_family: str | None,
) -> LoopPolicy | None:
    """The thresholds for one request, or None for no detection. Raises ValueError
    (naming the field) for bad request values or a bad environment value."""
    given = {name: request_fields[name] for name in LOOP_FIELDS if request_fields.get(name) is not None}
    if given:
        policy = validate_loop_params(given.get("max_pattern_size", 0), given.get("min_pattern_size", 0),
                                      given.get("min_count", 0), count_below_two_disables=True)
        return policy if policy[0] > 0 and policy[2] >= 2 else None
    if env_value is not None and env_value.strip():
        return parse_loop_env(env_value)
    return family_loop_default(model_family)
