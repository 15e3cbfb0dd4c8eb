"""Which proposal a prompt-lookup slot drafts: the history's or its prediction's,
whichever its acceptance statistics expect more of."""

from mlxcel.engine.draft_choice import DraftChooser
from mlxcel.engine.draft_tracker import SlotAcceptance
from mlxcel.engine.prompt_lookup import REJOINED, PromptLookup
from mlxcel.engine.request import GenerationRequest
from mlxcel.engine.slots import Slot, SlotState

HISTORY = [10, 11, 12, 13, 14, 10, 11]  # the tail (10, 11) occurred once, followed by 12, 13, 14
PREDICTION = [99, 10, 11, 50, 51, 52]  # the output departed at once; its tail is in here too


def _slot() -> Slot:
    request = GenerationRequest(prompt_tokens=HISTORY[:-1], emit=lambda event: None, prediction=PREDICTION)
    slot = Slot(0, SlotState.DECODE, cached_tokens=list(HISTORY), request=request)
    slot.lookup = PromptLookup(2, 8, 1, PREDICTION, output_start=len(HISTORY) - 1)
    slot.acceptance = SlotAcceptance(8)
    return slot


def _chooser() -> DraftChooser:
    return DraftChooser(None, cap=8, draft_min=1, decode_costs=None, batch_capacity=64, n_ctx_slot=512, n_ubatch=512)


def test_a_prediction_is_drafted_until_it_fails_then_the_history_is():
    slot, chooser = _slot(), _chooser()
    option = chooser.option(slot, 1, 1.0)
    # a rejoined prediction (prior 0.8) beats a 2-token match in the history (prior 0.6)
    assert option.predicted and option.tokens == [50, 51, 52]
    for _ in range(4):  # the output kept departing from the prediction's proposals
        slot.acceptance.stats(REJOINED).observe(1, 0)
    option = chooser.option(slot, 1, 1.0)
    assert not option.predicted and option.tokens == [12, 13, 14, 10, 11]


def test_without_a_prediction_the_history_is_drafted():
    slot, chooser = _slot(), _chooser()
    slot.lookup = PromptLookup(2, 8, 1)
    option = chooser.option(slot, 1, 1.0)
    assert not option.predicted and option.tokens == [12, 13, 14, 10, 11]


class _Drafter:
    """Stands in for a draft model: records being asked, proposes a fixed run."""

    seconds_per_token = 0.0

    def __init__(self) -> None:
        self.asked = 0

    def draft(self, seq: int, history: list[int], limit: int) -> list[int]:
        self.asked += 1
        return [77] * limit


def test_beside_a_draft_model_a_prediction_expected_to_hold_longer_is_drafted_instead():
    from mlxcel.engine.draft_tracker import DRAFT_MODEL_PRIORS
    from mlxcel.engine.prompt_lookup import PREDICTED

    prompt, prediction = [1, 2, 3], [40, 41, 42, 43, 44, 45, 46, 47, 48, 49]
    request = GenerationRequest(prompt_tokens=prompt, emit=lambda event: None, prediction=prediction)
    slot = Slot(0, SlotState.DECODE, cached_tokens=[*prompt, 40], request=request)
    slot.lookup = PromptLookup(3, 4, 1, prediction, output_start=len(prompt))
    slot.acceptance = SlotAcceptance(4, DRAFT_MODEL_PRIORS)
    drafter = _Drafter()
    chooser = DraftChooser(drafter, cap=4, draft_min=1, decode_costs=None, batch_capacity=64, n_ctx_slot=512,
                           n_ubatch=512)
    option = chooser.option(slot, 1, 1.0)
    assert option.predicted and option.tokens == [41, 42, 43, 44] and drafter.asked == 0
    for _ in range(4):  # the reply kept refusing the prediction's first token
        slot.acceptance.stats(PREDICTED).observe(1, 0)
    option = chooser.option(slot, 1, 1.0)
    assert not option.predicted and option.tokens == [77] * 4 and drafter.asked == 1


def _cache_slot(cache_prompt: bool = True) -> Slot:
    history = [5, 6, 7, 1, 2]  # nothing repeats: prompt lookup proposes nothing
    request = GenerationRequest(prompt_tokens=history[:-1], emit=lambda event: None, cache_prompt=cache_prompt)
    slot = Slot(0, SlotState.DECODE, cached_tokens=list(history), request=request)
    slot.lookup = PromptLookup(2, 8, 1)
    slot.acceptance = SlotAcceptance(8)
    return slot


def test_the_lookup_caches_are_drafted_where_the_request_s_own_text_proposes_nothing():
    from mlxcel.engine.draft_policy import DecodeCosts
    from mlxcel.engine.lookup_cache import LookupCaches, StaticCounts
    from mlxcel.engine.prompt_lookup import LOOKUP_CACHE

    caches = LookupCaches(StaticCounts.from_counts({(1, 2): {3: 4}, (2, 3): {4: 4}}), {(2,): {30: 9}}, None)
    costs = DecodeCosts({n: 0.010 + 0.002 * (n - 1) for n in range(1, 17)})  # a second token costs a fifth more
    chooser = DraftChooser(None, cap=8, draft_min=1, decode_costs=costs, batch_capacity=64, n_ctx_slot=512,
                           n_ubatch=512, lookup_caches=caches)
    option = chooser.option(_cache_slot(), 1, 1.0)
    # the dynamic counts (what the server generated) first: 30 after 2, then nothing follows 30
    assert option.lookup_cache and not option.traffic and option.tokens == [30]
    # a request that opts out of the server's state is drafted from the static counts only
    option = chooser.option(_cache_slot(cache_prompt=False), 1, 1.0)
    assert option.lookup_cache and option.tokens == [3, 4]
    slot = _cache_slot()
    for _ in range(6):  # its drafts kept failing: drafting them no longer pays
        slot.acceptance.stats(LOOKUP_CACHE).observe(1, 0)
    option = chooser.option(slot, 1, 1.0)
    assert option.lookup_cache and option.tokens == [30] and option.length == 0  # followed, not drafted
