"""A model as judge: parse its verdicts, take the majority of k, reward the judges.

The rules are SPELL's verifier (Yang et al., "SPELL: Self-Play Reinforcement Learning for
Evolving Long-Context Language Models", Tongyi-Zhiwen 2025; numbers cited from its trainer
and ``core_algos``); the code is ours. A judgment ends with ``[[YES]]`` or ``[[NO]]``
(:func:`parse_judgment`: 1, 0, or -1 when unparseable). The k judgments of one answer give
a majority (:func:`verifier_majority`). The answer's reward is max(rule, majority) when the
majority is valid, else the rule score (:func:`responder_reward`). Each judgment earns 1 if
it agrees with the majority, 0 if not, -1 for bad format (:func:`verifier_rewards`); the
judge is trained only where the majority's share of the valid judgments lies in
[0.51, 0.99] and the majority equals the rule score (:func:`verifier_train_mask`).

Where we differ from upstream, on purpose: a tie between the top vote counts gives no
majority (upstream keeps whichever value came first).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from serl.recipes.spell.qa import MAX_SCAN_CHARS, strip_thinking

VERIFIER_SHARE_BOUNDS = (0.51, 0.99)
_JUDGE = re.compile(r"\[\[\s*(yes|no)\s*\]\]", re.IGNORECASE)


def parse_judgment(text: str, max_chars: int = MAX_SCAN_CHARS) -> int:
    """1 for ``[[YES]]``, 0 for ``[[NO]]``, -1 when neither or both appear (or the
    thinking block never closes). Case and inner spaces are ignored."""
    body = strip_thinking(text)
    if body is None:
        return -1
    found = {m.group(1).lower() for m in _JUDGE.finditer(body[-max_chars:])}
    if found == {"yes"}:
        return 1
    if found == {"no"}:
        return 0
    return -1


@dataclass(frozen=True)
class Majority:
    """The verifier's verdict on one answer."""

    label: int  # 1 yes, 0 no, -1 no valid majority (bad format wins, a tie, or no judgments)
    share: float  # the label's share of the valid (0/1) judgments; 0.0 when label is -1
    n_valid: int  # judgments that parsed
    n: int  # all judgments

    @property
    def valid(self) -> bool:
        return self.label >= 0


def verifier_majority(judgments: Sequence[int]) -> Majority:
    """Most common of the k judgments (1, 0 or -1); a tie at the top is no majority."""
    bad = [j for j in judgments if j not in (1, 0, -1)]
    if bad:
        raise ValueError(f"judgments must be 1, 0 or -1, got {bad[0]!r}")
    n = len(judgments)
    n_valid = sum(1 for j in judgments if j != -1)
    top = Counter(judgments).most_common()
    if not top or (len(top) > 1 and top[0][1] == top[1][1]) or top[0][0] == -1:
        return Majority(-1, 0.0, n_valid, n)
    label, count = top[0]
    return Majority(label, count / n_valid, n_valid, n)


def responder_reward(rule: float, majority: Majority) -> float:
    """max(rule score, verifier majority) when the majority is valid, else the rule score."""
    return max(rule, float(majority.label)) if majority.valid else rule


def verifier_rewards(judgments: Sequence[int], majority: Majority) -> list[float]:
    """Per judgment: -1 bad format, 1 agrees with the majority, 0 otherwise (also when
    there is no valid majority; such groups are masked out of training anyway)."""
    return [-1.0 if j == -1 else (1.0 if majority.valid and j == majority.label else 0.0) for j in judgments]


def label_rewards(judgments: Sequence[int], label: float) -> list[float]:
    """Per judgment against a known label (the verifier warm-up): -1 bad format, 1 equal, 0 not."""
    return [-1.0 if j == -1 else float(j == label) for j in judgments]


def verdict_metrics(labels: Sequence[float], judgments: Sequence[Sequence[int]]) -> dict[str, float]:
    """Judgments against known labels (one list per labelled item): accuracy, bad format, the YES
    share of valid judgments on items labelled right and on those labelled wrong, mean reward."""
    flat = [(j, y) for y, js in zip(labels, judgments) for j in js]
    valid = [(j, y) for j, y in flat if j != -1]

    def share(num: float, den: int) -> float:
        return num / den if den else float("nan")  # nothing to measure: NaN (logged as null)

    return {
        "accuracy": share(sum(j == y for j, y in flat), len(flat)),
        "bad_format": share(len(flat) - len(valid), len(flat)),
        "yes_if_right": share(sum(j == 1 for j, y in valid if y == 1.0), sum(y == 1.0 for _, y in valid)),
        "yes_if_wrong": share(sum(j == 1 for j, y in valid if y == 0.0), sum(y == 0.0 for _, y in valid)),
        "reward_mean": share(sum(label_rewards([j], y)[0] for j, y in flat), len(flat)),
    }


def verifier_train_mask(majority: Majority, rule: float, bounds: tuple[float, float] = VERIFIER_SHARE_BOUNDS) -> bool:
    """Train the verifier on this answer's judgments only if the majority is valid, its
    share lies in ``bounds`` (inclusive) and it agrees with the rule score."""
    lo, hi = bounds
    return majority.valid and lo <= majority.share <= hi and float(majority.label) == rule
