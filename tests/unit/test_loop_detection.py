"""Loop detection: the tail-repetition detector and the request/env/family policy."""

from __future__ import annotations

import random

import pytest

from mlxcel.engine.loop_detection import (
    LoopDetector,
    family_loop_default,
    parse_loop_env,
    resolve_loop_policy,
    validate_loop_params,
)


def _first_hit(detector, tokens):
    for i, token in enumerate(tokens):
        if detector.observe(token):
            return i
    return None


def _brute_force(tokens, max_size, min_size, count):
    """Index of the first prefix whose tail is some pattern repeated `count` times."""
    min_size = max(1, min_size)
    for end in range(1, len(tokens) + 1):
        for size in range(min_size, max_size + 1):
            span = size * count
            if span <= end:
                tail = tokens[end - span : end]
                if all(tail[i] == tail[i % size] for i in range(span)):
                    return end - 1
    return None


def test_single_token_repeat():
    detector = LoopDetector(20, 1, 4)
    assert _first_hit(detector, [5, 7, 7, 7, 7, 8]) == 4
    assert detector.pattern_size == 1


def test_phrase_repeat_needs_min_count_copies():
    phrase = [10, 11, 12, 13, 14]
    detector = LoopDetector(20, 1, 3)
    tokens = [1, 2] + phrase * 3
    assert _first_hit(detector, tokens) == len(tokens) - 1
    assert detector.pattern_size == 5
    assert _first_hit(LoopDetector(20, 1, 4), [1, 2] + phrase * 3) is None


def test_pattern_longer_than_max_or_shorter_than_min_is_ignored():
    assert _first_hit(LoopDetector(4, 1, 2), [1, 2, 3, 4, 5] * 3) is None
    assert _first_hit(LoopDetector(4, 2, 3), [9, 9, 9, 1]) is None  # size 1 below min
    assert _first_hit(LoopDetector(4, 2, 3), [9, 9, 9, 9, 9, 9]) == 5  # seen as (9 9) x 3


def test_broken_repetition_resets():
    detector = LoopDetector(3, 1, 3)
    assert _first_hit(detector, [1, 2, 1, 2, 3, 1, 2, 1, 2]) is None
    assert detector.observe(1) is False
    assert detector.observe(2) is True


def test_disabled_configurations():
    for args in [(0, 1, 4), (-1, 1, 4), (20, 1, 1), (20, 1, 0), (3, 5, 2)]:
        detector = LoopDetector(*args)
        assert not detector.enabled
        assert _first_hit(detector, [7] * 100) is None


def test_min_pattern_size_zero_means_one():
    assert _first_hit(LoopDetector(5, 0, 3), [4, 4, 4]) == 2


def test_reset_forgets_history():
    detector = LoopDetector(2, 1, 3)
    detector.observe(1)
    detector.observe(1)
    detector.reset()
    assert detector.observe(1) is False


def test_matches_brute_force_on_random_streams():
    rng = random.Random(3)
    for _ in range(300):
        max_size, min_size, count = rng.randint(1, 6), rng.randint(0, 3), rng.randint(2, 4)
        if max(1, min_size) > max_size:
            continue
        tokens = []
        while len(tokens) < 60:
            if rng.random() < 0.3 and tokens:
                size = rng.randint(1, 6)
                tokens += (tokens[-size:] or [0]) * rng.randint(1, 4)
            else:
                tokens.append(rng.randint(0, 3))
        expected = _brute_force(tokens, max_size, min_size, count)
        assert _first_hit(LoopDetector(max_size, min_size, count), tokens) == expected


# --- policy ------------------------------------------------------------------


def test_request_fields_win_over_env_and_family():
    assert resolve_loop_policy({"max_pattern_size": 8, "min_count": 3}, "20,1,4", "gemma4") == (8, 1, 3)
    assert resolve_loop_policy({"max_pattern_size": 0}, "20,1,4", "gemma4") is None  # force-disable
    assert resolve_loop_policy({"min_count": 5}, None, "gemma4") is None  # no max: off, as in vLLM
    assert resolve_loop_policy({"max_pattern_size": 6, "min_pattern_size": 2, "min_count": 2}, None, None) == (
        6,
        2,
        2,
    )


def test_absent_or_null_fields_fall_through():
    fields = {"max_pattern_size": None, "min_pattern_size": None, "min_count": None, "temperature": 0}
    assert resolve_loop_policy(fields, None, "gemma4") == (20, 1, 4)
    assert resolve_loop_policy({}, "6,2,3", "gemma4") == (6, 2, 3)
    assert resolve_loop_policy({}, "off", "gemma4") is None
    assert resolve_loop_policy({}, "  ", "gemma4") == (20, 1, 4)  # empty env counts as unset
    assert resolve_loop_policy({}, None, "llama") is None
    assert resolve_loop_policy({}, None, None) is None


def test_env_format():
    assert parse_loop_env("20,1,4") == (20, 1, 4)
    assert parse_loop_env(" 10, 0, 3 ") == (10, 1, 3)
    assert parse_loop_env("on") == (20, 1, 4)
    for off in ("off", "OFF", "0", "none", "false", "no", "disabled", "0,0,0"):
        assert parse_loop_env(off) is None
    for bad in ("yes", "20,1", "20,1,4,5", "a,b,c", "20;1;4"):
        with pytest.raises(ValueError, match="MLXCEL_LOOP_DETECTION"):
            parse_loop_env(bad)
    with pytest.raises(ValueError, match="MLXCEL_LOOP_DETECTION: min_count must be >= 2"):
        parse_loop_env("20,1,1")


def test_family_names():
    for name in ("gemma4", "Gemma4", "gemma-4", "gemma4_text"):
        assert family_loop_default(name) == (20, 1, 4)
    for name in ("gemma3", "qwen3", "", None):
        assert family_loop_default(name) is None


@pytest.mark.parametrize(
    "fields,message",
    [
        ({"max_pattern_size": -1, "min_count": 3}, "max_pattern_size must be >= 0"),
        ({"max_pattern_size": 4, "min_pattern_size": -2, "min_count": 3}, "min_pattern_size must be >= 0"),
        (
            {"max_pattern_size": 4, "min_pattern_size": 5, "min_count": 3},
            "min_pattern_size must be <= max_pattern_size",
        ),
        ({"max_pattern_size": "20", "min_count": 3}, "max_pattern_size must be an integer"),
        ({"max_pattern_size": 20, "min_count": True}, "min_count must be an integer"),
        ({"max_pattern_size": 20, "min_count": 2.5}, "min_count must be an integer"),
    ],
)
def test_bad_request_values_name_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        resolve_loop_policy(fields, None, None)


def test_a_request_min_count_below_two_turns_detection_off():
    for count in (1, 0, -5):
        assert resolve_loop_policy({"max_pattern_size": 20, "min_count": count}, "20,1,4", "gemma4") is None
    assert resolve_loop_policy({"max_pattern_size": 20}, None, "gemma4") is None  # no count: 0
    assert resolve_loop_policy({"max_pattern_size": 20, "min_count": 2}, None, None) == (20, 1, 2)
    with pytest.raises(ValueError, match="min_pattern_size must be <= max_pattern_size"):
        resolve_loop_policy({"max_pattern_size": 2, "min_pattern_size": 3, "min_count": 1}, None, None)
    with pytest.raises(ValueError, match="min_count must be >= 2"):
        validate_loop_params(20, 1, 1)  # the environment's thresholds stay strict


def test_disabled_request_skips_the_cross_checks():
    assert validate_loop_params(0, 0, 1) == (0, 1, 1)
    assert resolve_loop_policy({"max_pattern_size": 0, "min_count": 1}, None, "gemma4") is None
