"""How far a slot's proposals hold, whether they were drafted or not.

Every proposal prompt lookup makes for a slot is followed against the tokens the
slot emits next, drafted or not: a proposal left undrafted (a "shadow") costs
nothing and still says whether drafting it would have paid. So a slot whose text
is not being copied stops drafting after a few proposals fail, keeps learning from
the proposals it does not draft, and drafts again as soon as they start to hold,
with no blind re-probing. Statistics are kept per match-length class: a long match
(text being copied) and a short one (a common phrase) hold very differently.
"""

from __future__ import annotations

from mlxcel.engine.draft_policy import AcceptanceStats

# the prior survival rate of each match-length class (prompt_lookup.match_class): a
# short match must prove itself on shadows before it is drafted; a long one drafts;
# then the request's own prediction: the output continuing along it (PREDICTED), the
# output rejoining it after departing from it (REJOINED); then earlier requests'
# outputs (TRAFFIC), by match length as the request's own; then the lookup caches'
# statistics (LOOKUP_CACHE), which prove themselves on shadows first, as a short match
CLASS_PRIORS = (0.6, 0.8, 0.9, 0.95, 0.8, 0.6, 0.8, 0.9, 0.6)
# beside a draft model: its drafts (class 0), then the prediction's two classes (the others unused)
DRAFT_MODEL_PRIORS = (0.9, 0.9, 0.9, 0.95, 0.8)


class SlotAcceptance:
    """One slot's acceptance evidence per match class, and the proposal being followed."""

    def __init__(self, max_draft: int, priors: tuple[float, ...] | None = None) -> None:
        self.classes = [AcceptanceStats(max_draft, prior) for prior in priors or CLASS_PRIORS]
        self._tokens: list[int] = []  # the proposal being followed
        self._class = 0
        self._matched = 0

    def stats(self, match_class: int) -> AcceptanceStats:
        return self.classes[min(match_class, len(self.classes) - 1)]

    @property
    def following(self) -> bool:
        return bool(self._tokens)

    def follow(self, tokens: list[int], match_class: int) -> None:
        """Follow a new proposal (drafted or not) from the slot's next emitted token on;
        one still followed ends here, counted as far as it held (not as failed)."""
        self._settle(failed=False)
        self._tokens, self._class, self._matched = list(tokens), match_class, 0

    def emitted(self, token: int) -> None:
        """The slot emitted `token` (sampled, accepted from a draft, or forced)."""
        if not self._tokens:
            return
        if token != self._tokens[self._matched]:
            self._settle(failed=True)
            return
        self._matched += 1
        if self._matched == len(self._tokens):
            self._settle(failed=False)

    def _settle(self, failed: bool) -> None:
        if self._tokens:
            reached = self._matched + 1 if failed else self._matched
            self.stats(self._class).observe(reached, self._matched)
        self._tokens = []
