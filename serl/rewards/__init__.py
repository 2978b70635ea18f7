"""Rewards: answer extraction, math equivalence, majority vote, rule reward.

The HTTP server for OpenRLHF's remote reward protocol is in
:mod:`serl.rewards.server`; the security notes on parsing model output are in
:mod:`serl.rewards.safety`.
"""

from serl.rewards.equivalence import EquivalenceChecker, checker_counts
from serl.rewards.extract import extract_answer, normalize_label
from serl.rewards.normalize import is_empty, normalize
from serl.rewards.vote import GroupScore, maj_at_k, majority_vote, rule_reward, score_groups, summarize

__all__ = [
    "EquivalenceChecker",
    "checker_counts",
    "GroupScore",
    "extract_answer",
    "is_empty",
    "maj_at_k",
    "majority_vote",
    "normalize",
    "normalize_label",
    "rule_reward",
    "score_groups",
    "summarize",
]
