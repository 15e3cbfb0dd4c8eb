"""Back-off and return of prompt-lookup drafting: every proposal, drafted or not, is
followed against what the slot emits, per match-length class."""

from mlxcel.engine.draft_policy import DecodeCosts, best_draft_length
from mlxcel.engine.draft_tracker import SlotAcceptance
from tests.unit.test_draft_policy import CPU

SHORT, LONG = 0, 2  # match classes


def drafts_now(acceptance: SlotAcceptance, kind: int, n_proposed: int = 16) -> int:
    """The draft length one stream would draft now for a proposal of this class."""
    return best_draft_length(DecodeCosts(CPU), acceptance.stats(kind).expected_accepted(n_proposed), 1, 1.0, 2)


def shadow(acceptance: SlotAcceptance, kind: int, proposal: list[int], emitted: list[int]) -> None:
    acceptance.follow(proposal, kind)
    for token in emitted:
        acceptance.emitted(token)


def test_a_short_match_must_prove_itself_and_a_long_one_drafts_at_once():
    acceptance = SlotAcceptance(48)
    assert drafts_now(acceptance, SHORT) == 0
    assert drafts_now(acceptance, LONG) > 0


def test_proposals_that_fail_stop_drafting_at_no_cost_and_holding_ones_bring_it_back():
    acceptance = SlotAcceptance(48)
    proposal = list(range(100, 116))
    for _ in range(6):  # text the model does not copy: each undrafted proposal fails at once
        shadow(acceptance, LONG, proposal, [7])
    assert drafts_now(acceptance, LONG) == 0
    for _ in range(6):  # the model starts copying: the same undrafted proposals now hold
        shadow(acceptance, LONG, proposal, proposal)
    assert drafts_now(acceptance, LONG) >= 7


def test_classes_keep_separate_evidence():
    acceptance = SlotAcceptance(48)
    for _ in range(6):
        shadow(acceptance, SHORT, [1, 2, 3, 4], [9])
    assert drafts_now(acceptance, SHORT) == 0 and drafts_now(acceptance, LONG) > 0


def test_a_new_proposal_ends_the_followed_one_as_far_as_it_held():
    acceptance = SlotAcceptance(8)
    acceptance.follow([1, 2, 3, 4], SHORT)
    acceptance.emitted(1)
    acceptance.emitted(2)
    acceptance.follow([3, 4, 5], SHORT)  # two positions held, the third is not yet known
    stats = acceptance.stats(SHORT)
    assert stats.reached[:3] == [1.0, 1.0, 0.0] and stats.accepted[:2] == [1.0, 1.0]
    acceptance.emitted(8)  # the new one fails at its first token
    assert stats.reached[0] > stats.accepted[0]
    assert not acceptance.following
    acceptance.emitted(3)  # nothing followed: ignored
    assert not acceptance.following


def test_a_proposal_that_held_to_its_end_is_settled_without_a_failure():
    acceptance = SlotAcceptance(8)
    shadow(acceptance, SHORT, [1, 2], [1, 2])
    stats = acceptance.stats(SHORT)
    assert not acceptance.following
    assert stats.reached[:3] == [1.0, 1.0, 0.0] and stats.accepted[:2] == [1.0, 1.0]
