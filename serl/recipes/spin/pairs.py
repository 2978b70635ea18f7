"""Online-DPO pairs: the best against the worst of each prompt's sampled responses.

Each prompt gets n sampled responses and a reward for each (a float, or None where the
response gave no answer). The response with the highest reward is ``chosen``, the one
with the lowest ``rejected`` (the verl online-DPO recipe inspired by SPIN). Where this
differs from upstream, which trains tied groups with an arbitrary winner:

- **Ties are dropped and counted.** A group whose responses all have the same reward
  (within ``TIE_TOL``) says nothing about which is better.
- **Missing answers.** With ``missing="worst"`` (the default) a response without an
  answer ranks below every scored one: it can be rejected, never chosen, so a group of
  one wrong answer and one non-answer still teaches answering. A group where every
  response lacks an answer is a tie. With ``missing="skip"`` such responses are left out
  before choosing.
- **Duplicates.** Several responses sharing the best (or worst) reward: the first of them,
  by position, is taken; samples are i.i.d., so position carries no preference. When
  ``texts`` are given and the chosen and rejected text are the same string, the pair
  is dropped (its gradient would cancel) and counted as ``identical``.
- Groups with fewer than two usable responses are dropped as ``too_small``.

Rewards are model-derived numbers; NaN, infinities and non-numbers are refused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

TIE_TOL = 1e-9
MISSING_POLICIES = ("worst", "skip")


@dataclass(frozen=True)
class Pair:
    group: int  # index of the prompt's group
    chosen: int  # index of the chosen response within its group
    rejected: int  # index of the rejected response within its group
    chosen_reward: float  # reward of the chosen response
    rejected_reward: float | None  # reward of the rejected response; None = no answer


@dataclass
class PairCounts:
    groups: int = 0  # groups seen
    pairs: int = 0  # pairs built (at most one per group)
    tied: int = 0  # groups dropped because every response had the same reward
    too_small: int = 0  # groups dropped with fewer than two usable responses
    identical: int = 0  # groups dropped because chosen and rejected text were the same
    missing: int = 0  # responses without an answer (reward None), over all groups

    @property
    def dropped(self) -> int:
        return self.tied + self.too_small + self.identical

    def as_metrics(self, prefix: str = "pairs/") -> dict[str, float]:
        out = {prefix + f.name: float(getattr(self, f.name)) for f in fields(self)}
        out[prefix + "dropped"] = float(self.dropped)
        out[prefix + "tied_frac"] = self.tied / self.groups if self.groups else 0.0
        return out


def _check(reward, g: int, i: int) -> float | None:
    if reward is None:
        return None
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        raise ValueError(f"group {g}, response {i}: reward must be a number or None, got {type(reward).__name__}")
    if not math.isfinite(reward):
        raise ValueError(f"group {g}, response {i}: reward must be finite, got {reward}")
    return float(reward)


def best_worst_pairs(
    rewards: Sequence[Sequence[float | None]], texts: Sequence[Sequence[str]] | None = None, missing: str = "worst"
) -> tuple[list[Pair], PairCounts]:
    """One (best, worst) pair per group of responses; see the module doc for the rules."""
    if missing not in MISSING_POLICIES:
        raise ValueError(f"missing must be one of {MISSING_POLICIES}, got {missing!r}")
    if texts is not None and [len(t) for t in texts] != [len(r) for r in rewards]:
        raise ValueError("texts and rewards must have the same groups and group sizes")
    pairs: list[Pair] = []
    counts = PairCounts()
    for g, group in enumerate(rewards):
        counts.groups += 1
        scored = [(i, _check(r, g, i)) for i, r in enumerate(group)]
        counts.missing += sum(r is None for _, r in scored)
        if missing == "skip":
            scored = [(i, r) for i, r in scored if r is not None]
        if len(scored) < 2:
            counts.too_small += 1
            continue
        # None ranks below every float; ties keep the first position
        key = [(-math.inf if r is None else r) for _, r in scored]
        top, bottom = max(key), min(key)
        if top == -math.inf or top - bottom <= TIE_TOL:
            counts.tied += 1
            continue
        c = scored[key.index(top)]
        w = scored[key.index(bottom)]
        if texts is not None and texts[g][c[0]] == texts[g][w[0]]:
            counts.identical += 1
            continue
        assert c[1] is not None  # the top is a float: an all-None group is tied at -inf above
        pairs.append(Pair(g, c[0], w[0], c[1], w[1]))
        counts.pairs += 1
    return pairs, counts
