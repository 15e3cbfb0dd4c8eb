"""Replay and compaction planning stay linear in the number of items: 20,000 items
take well under a second (the quadratic versions took tens of seconds), and the
linear versions agree with the definitions they replace."""

from __future__ import annotations

import random
import time

from mlxcel.api.responses.capsule import Capsule, encode_capsule
from mlxcel.api.responses.compaction import split_history, valid_splits
from mlxcel.api.responses.input_items import SUMMARY_HEADING, SUMMARY_MARK, collapse, item_kind, replay
from tests.unit.responses_items import assistant, call, result, user

N = 20_000
FAST = 2.0  # seconds: generous for a loaded machine, far below what quadratic work takes at N


def compaction(summary, retained=()):
    return {"type": "compaction", "encrypted_content": encode_capsule(Capsule(summary, list(retained)))}


def timed(work):
    start = time.perf_counter()
    value = work()
    return value, time.perf_counter() - start


def test_replaying_many_compaction_items_is_fast_and_keeps_only_the_last_summary():
    items = [compaction(f"s{i}") for i in range(N)] + [user("hi")]
    replayed, seconds = timed(lambda: replay(items))
    assert seconds < FAST
    assert replayed == [{"type": "message", "role": "system", "content": SUMMARY_HEADING + f"s{N - 1}",
                         SUMMARY_MARK: True}, user("hi")]


def test_replay_with_system_messages_between_many_compaction_items_is_fast():
    items = []
    for i in range(N // 2):
        items += [{"role": "system", "content": f"sys{i}"}, compaction(f"s{i}", [user(f"kept{i}")])]
    replayed, seconds = timed(lambda: replay(items))
    assert seconds < FAST
    assert [i["content"] for i in replayed[:2]] == ["sys0", "sys1"] and len(replayed) == N // 2 + 2
    assert replayed[-2]["content"] == SUMMARY_HEADING + f"s{N // 2 - 1}" and replayed[-1] == user(f"kept{N // 2 - 1}")


def test_a_later_compaction_item_stands_for_the_earlier_summary_too():
    items = [{"role": "system", "content": "a"}, compaction("first", [user("r1")]), user("u1"),
             {"role": "developer", "content": "b"}, compaction("second", [user("r2")]), user("u2")]
    replayed = replay(items)
    assert [i["content"] for i in replayed] == ["a", "b", SUMMARY_HEADING + "second", "r2", "u2"]
    # what a stored history collapses to replays the same
    assert replay(collapse(items)) == replayed


def _splits_by_definition(turns):
    """The quadratic definition the linear valid_splits replaces."""
    floor = max((i + 1 for i, t in enumerate(turns) if t.get(SUMMARY_MARK)), default=0)
    out = []
    for i in range(max(floor, 1), len(turns) + 1):
        before_user = i < len(turns) and item_kind(turns[i]) == "message" and turns[i].get("role") == "user"
        if not (before_user or item_kind(turns[i - 1]) == "function_call_output"):
            continue
        calls = {t.get("call_id") for t in turns[:i] if item_kind(t) == "function_call"}
        outputs = {t.get("call_id") for t in turns[i:] if item_kind(t) == "function_call_output"}
        if not calls & outputs:
            out.append(i)
    return out


def _random_turns(rng: random.Random, n: int) -> list[dict]:
    turns, pending = [], []
    for _ in range(n):
        roll = rng.random()
        if roll < 0.3:
            turns.append(user("u"))
        elif roll < 0.45:
            turns.append(assistant("a"))
        elif roll < 0.7:
            call_id = f"c{rng.randrange(6)}"
            turns.append(call(call_id))
            pending.append(call_id)
        elif roll < 0.95 and pending:
            turns.append(result(pending.pop(rng.randrange(len(pending)))))
        else:
            turns.append({"type": "message", "role": "system", "content": "old", SUMMARY_MARK: True})
    return turns


def test_valid_splits_agree_with_their_definition():
    rng = random.Random(7)
    for _ in range(400):
        turns = _random_turns(rng, rng.randrange(1, 30))
        assert valid_splits(turns) == _splits_by_definition(turns), turns


def test_valid_splits_of_many_alternating_turns_is_fast():
    turns = [user(str(i)) if i % 2 == 0 else assistant(str(i)) for i in range(N)]
    turns[N // 2:N // 2] = [call("x"), result("x")]
    splits, seconds = timed(lambda: valid_splits(turns))
    assert seconds < FAST
    assert len(splits) == N // 2 - 1 and N // 2 + 1 not in splits  # not between the call and its output


def _split_by_definition(turns, keep_tokens, size):
    splits = [s for s in _splits_by_definition(turns)
              if s <= max((i for i, t in enumerate(turns) if t.get("role") == "user"), default=len(turns))]
    if not splits:
        return 0
    for s in splits:
        if sum(size(t) for t in turns[s:]) <= keep_tokens:
            return s
    return splits[-1]


def test_split_history_agrees_with_its_definition():
    rng = random.Random(11)
    sizes = {}

    def size(item):
        return sizes.setdefault(id(item), rng.randrange(1, 20))

    for _ in range(300):
        turns = [t for t in _random_turns(rng, rng.randrange(1, 25)) if not t.get(SUMMARY_MARK)]
        keep = rng.randrange(1, 120)
        split = split_history(turns, keep, size)
        if not split.older:
            continue
        assert len(split.older) == _split_by_definition(turns, keep, size), (turns, keep)


def test_split_history_sizes_only_the_newest_items_it_may_keep():
    turns = [user(str(i)) if i % 2 == 0 else assistant(str(i)) for i in range(N)] + [user("last")]
    sized = []

    def size(item):
        sized.append(item)
        return 10

    split, seconds = timed(lambda: split_history(turns, keep_tokens=100, item_tokens=size))
    assert seconds < FAST
    assert len(sized) <= 12 and split.retained == turns[-9:]
