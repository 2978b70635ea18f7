"""The label-free training options of the SeRL recipe (issue 62), as pure functions.

* Cut answers scored instead of masked (every reward mode): DAPO's soft overlong penalty
  (Yu et al. 2025, arXiv:2503.14476 §3.4; OpenRLHF 0.11 ``--reward.overlong_buffer_len``,
  ``--reward.overlong_penalty_factor``) and ProRL's stop-properly penalty (OpenRLHF 0.11
  ``--reward.stop_properly_penalty_coef``), applied in that order, as OpenRLHF does.
* Groups without a clear majority masked (CuMa, Roy et al. 2025, arXiv:2511.04902).
* Advantages weighted by the group's majority share, after RESTRAIN's prompt-level
  weighting (Yu et al. 2025, arXiv:2510.02172).
* An easy-first curriculum: seeds ordered by the vote share of a probe rollout (CuMa).

docs/algorithms.md gives each formula; tests/recipes/serl/test_label_free_options.py checks
them against numbers worked by hand.
"""

from __future__ import annotations

import random

from serl.data.passes import Passes


# ---- cut answers scored ----------------------------------------------------------------------
def overlong_penalty(length: int, max_len: int, buffer_len: int, factor: float) -> float:
    """DAPO's soft overlong penalty (a value <= 0 added to the reward): 0 up to
    max_len - buffer_len tokens, then falling linearly to -factor at max_len (capped there).
    buffer_len 0: off."""
    if buffer_len <= 0:
        return 0.0
    over = min(length - (max_len - buffer_len), buffer_len)
    return -over / buffer_len * factor if over > 0 else 0.0


def stop_properly(reward: float, coef: float) -> float:
    """ProRL's stop-properly penalty on a cut answer (OpenRLHF's rule): coef in [0, 1] scales
    the reward (1: unchanged, 0: scored 0); a negative coef is the reward itself."""
    return coef if coef < 0 else reward * coef


def score_cut_answers(
    rewards: list[float], lengths: list[int], cut: list[bool], max_len: int, buffer_len: int, factor: float, coef: float
) -> tuple[list[float], dict]:
    """Rewards after the soft overlong penalty (by length, every answer) and then the
    stop-properly penalty (cut answers only), with what they did, for the step's metrics."""
    out, penalties, rescored = [], [], 0
    for r, n, c in zip(rewards, lengths, cut):
        p = overlong_penalty(n, max_len, buffer_len, factor)
        r += p
        if p:
            penalties.append(p)
        if c and coef != 1.0:
            r = stop_properly(r, coef)
            rescored += 1
        out.append(r)
    m: dict[str, float] = {}
    if buffer_len > 0:
        m["reward/overlong_penalized"] = len(penalties)
        m["reward/overlong_penalty_mean"] = sum(penalties) / len(penalties) if penalties else 0.0
    if coef != 1.0:
        m["reward/stop_properly_scored"] = rescored
    return out, m


# ---- the vote's agreement --------------------------------------------------------------------
def vote_share(score) -> float:
    """The share of a group's answers in its largest cluster (answers none count in n): the
    vote's agreement, also for a rule-scored group (whose ``agreement`` is its accuracy); a
    remote reward, which reports no clusters, gives its mean reward."""
    n = len(score.rewards)
    return max(score.cluster_sizes) / n if score.cluster_sizes and n else float(score.agreement)


def voted(score) -> bool:
    """Whether the group's reward came from a vote (not from a label)."""
    return score.source != "rule"


def no_majority(score, min_share: float) -> bool:
    """CuMa's mask: a voted group whose majority share is below ``min_share`` (0: never)."""
    return voted(score) and vote_share(score) < min_share


def agreement_weight(score, power: float) -> float:
    """The weight on a group's advantages: its majority share to ``power`` for a voted group
    (RESTRAIN-style prompt weight), 1 for a labelled one or with power 0."""
    return vote_share(score) ** power if power and voted(score) else 1.0


# ---- the easy-first curriculum ---------------------------------------------------------------
def easy_first(shares: list[float]) -> list[int]:
    """Indices by vote share, highest first; equal shares keep their order."""
    return sorted(range(len(shares)), key=lambda i: -shares[i])


class CurriculumPasses(Passes):
    """Passes over the seeds in one fixed order (easy first), the same order every pass."""

    def __init__(self, order: list[int], rng: random.Random | None = None):
        super().__init__(len(order), rng or random.Random(0))
        self.fixed = [int(i) for i in order]

    def next(self) -> int:
        if not self.order:
            self.order = list(self.fixed)
        return self.order.pop(0)
