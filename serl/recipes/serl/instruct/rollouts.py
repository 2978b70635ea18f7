"""Rolled-out groups that passed the difficulty filter, filled into one step's batch.

SeRL's step (Fang et al., 2025; its reference trainer's dynamic sampling): roll out a
batch's worth of prompts, keep the groups whose agreement lies in the band, and refill
(generate, roll out, filter) until a batch's worth is kept. Here the groups kept beyond
the batch wait for the next step and are trained first there (the reference lets them
expire), so no kept rollout is thrown away. ``Rollout.state`` is their checkpoint form.
The step's counters are summed over its rounds here and turned into means at its end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from serl.engines.base import Completion
from serl.recipes.serl.instruct.pool import PoolItem, PromptPool
from serl.rewards import GroupScore


@dataclass
class Rollout:
    """One prompt with its sampled group, the group's reward and the step that sampled it."""

    item: PoolItem
    group: list[Completion]
    score: GroupScore
    step: int = 0

    def state(self) -> dict:
        """Plain data for a checkpoint (the prompt by its pool id)."""
        return {
            "item": self.item.id,
            "group": [asdict(c) for c in self.group],
            "score": asdict(self.score),
            "step": self.step,
        }

    @classmethod
    def from_state(cls, state: dict, pool: PromptPool) -> Rollout:
        return cls(
            pool.get(state["item"]),
            [Completion(**c) for c in state["group"]],
            GroupScore(**state["score"]),
            int(state["step"]),
        )


def fill_batch(
    size: int, carried: list[Rollout], one_round: Callable[[], list[Rollout]], max_rounds: int
) -> tuple[list[Rollout], list[Rollout], int]:
    """The groups one step trains on: the carried ones first, then those ``one_round()``
    keeps (generate, roll out, filter), round after round, until ``size`` are kept or
    ``max_rounds`` rounds are spent. Returns (batch, carry for the next step, rounds)."""
    kept, rounds = list(carried), 0
    while len(kept) < size and rounds < max_rounds:
        rounds += 1
        kept += one_round()
    return kept[:size], kept[size:], rounds


# ---- a step's counters: summed over its rounds, then turned into the logged means ----------
STEP_COUNTS = (
    "filter/difficulty/kept",
    "filter/difficulty/too_easy",
    "filter/difficulty/too_hard",
    "batch/generated",
    "batch/rolled_out",
    "batch/skipped_long",
    "rollout/prompt_tokens",
    "rollout/gen_tokens",
)  # the rollout's work (bench/roofline.py)


def accumulate(into: dict, more: dict) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def round_sums(scores: list[GroupScore], groups: list[list[Completion]]) -> dict:
    """What one reward round adds to the step's sums (``finalize`` makes them means)."""
    return {
        "reward/sum": sum(sum(s.rewards) for s in scores),
        "reward/count": sum(len(s.rewards) for s in scores),
        "reward/agreement_sum": sum(s.agreement for s in scores),
        "reward/groups": len(scores),
        "reward/clusters_sum": sum(s.n_clusters for s in scores),
        "reward/no_answer": sum(s.n_no_answer for s in scores),
        "reward/ties": sum(int(s.tie) for s in scores),
        "response/length_sum": sum(len(c.token_ids) for g in groups for c in g),
        "response/truncated": sum(c.finish_reason == "length" for g in groups for c in g),
    }


def finalize(m: dict) -> None:
    """Turn the per-round sums in ``m`` into the means that are logged (in place)."""
    n, g = m.pop("reward/count", 0), m.pop("reward/groups", 0)
    if n:
        m["reward/mean"] = m.pop("reward/sum") / n
        m["reward/no_answer_frac"] = m.pop("reward/no_answer") / n
        m["response/length_mean"] = m.pop("response/length_sum") / n
        m["response/truncated_frac"] = m.pop("response/truncated") / n
    if m.get("instruct/candidates"):  # a rate over all rounds, not a sum of rates
        m["instruct/accept_rate"] = m["instruct/accepted"] / m["instruct/candidates"]
    if g:
        m["reward/agreement"] = m.pop("reward/agreement_sum") / g
        m["reward/clusters"] = m.pop("reward/clusters_sum") / g
        m["reward/groups"] = g


def batch_metrics(counts: dict, carried_in: int, carried_out: int, verify_before: dict, verify_after: dict) -> dict:
    """The step's filter and batch counters, and the checker's timeouts and errors in it."""
    out = dict(counts)
    out["batch/dropped"] = counts["filter/difficulty/too_easy"] + counts["filter/difficulty/too_hard"]
    out["batch/carried_in"], out["batch/carried_out"] = carried_in, carried_out
    for key, name in (("timeouts", "verify_timeouts"), ("check_errors", "verify_errors")):
        if key in verify_after:
            out[f"reward/{name}"] = verify_after[key] - verify_before.get(key, 0)
    return out
