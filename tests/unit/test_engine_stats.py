"""EngineStats: what finished requests add to the /metrics counters."""

from mlxcel.engine.stats import EngineStats


def test_accepted_drafts_per_position_add_up_across_requests_of_any_width():
    stats = EngineStats()
    stats.count_prediction(5, 1.0, 6, 3, 2, [2, 1, 0])
    before = stats.accepted_at
    stats.count_prediction(9, 1.0, 10, 4, 3, [3, 1, 0, 0, 0])
    stats.count_prediction(4, 1.0, 0, 0, 0, [])  # no drafts verified: nothing added
    assert stats.accepted_at == (5, 2, 0, 0, 0)
    assert before == (2, 1, 0)  # a snapshot's copy is never changed under it
    stats.count_prediction(0, 0.0, 2, 1, 1, [1, 0])  # generated nothing: not counted, as the other counters
    assert stats.accepted_at == (5, 2, 0, 0, 0)
