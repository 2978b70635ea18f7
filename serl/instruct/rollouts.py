"""Rolled-out groups that passed the difficulty filter, filled into one step's batch.

SeRL's step (Fang et al., 2025; its reference trainer's dynamic sampling): roll out a
batch's worth of prompts, keep the groups whose agreement lies in the band, and refill
(generate, roll out, filter) until a batch's worth is kept. Here the groups kept beyond
the batch wait for the next step and are trained first there (the reference lets them
expire), so no kept rollout is thrown away. ``Rollout.state`` is their checkpoint form.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

from serl.engines.base import Completion
from serl.instruct.pool import PoolItem, PromptPool
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
        return {"item": self.item.id, "group": [asdict(c) for c in self.group],
                "score": asdict(self.score), "step": self.step}

    @classmethod
    def from_state(cls, state: dict, pool: PromptPool) -> "Rollout":
        return cls(pool.get(state["item"]), [Completion(**c) for c in state["group"]],
                   GroupScore(**state["score"]), int(state["step"]))


def fill_batch(size: int, carried: list[Rollout], one_round: Callable[[], list[Rollout]],
               max_rounds: int) -> tuple[list[Rollout], list[Rollout], int]:
    """The groups one step trains on: the carried ones first, then those ``one_round()``
    keeps (generate, roll out, filter), round after round, until ``size`` are kept or
    ``max_rounds`` rounds are spent. Returns (batch, carry for the next step, rounds)."""
    kept, rounds = list(carried), 0
    while len(kept) < size and rounds < max_rounds:
        rounds += 1
        kept += one_round()
    return kept[:size], kept[size:], rounds
