"""One SPELL question's life, as data: what the questioner wrote, how it was checked,
the responder's samples and the verifier's judgments, and the rewards of all three roles.

The recipe (``serl.recipes.spell.recipe``) fills these in stage by stage with the
generator; everything here is pure, so it is tested without a model. The rules are
SPELL's (Tongyi-Zhiwen 2025), via :mod:`serl.recipes.spell.rewards`.

Statuses of a question:
``ok``          parsed, new, grounded: the responder answered it;
``bad_format``  no JSON question/answer block (questioner reward -1, trained);
``bad_ground``  answerable without the documents (reward -0.5, trained; not answered);
``too_long``    its answer is too long for cover-EM (dropped, not trained, as upstream);
``repeated``    too close (ROUGE-L) to an earlier question on its cluster (dropped).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from serl.engines.base import Completion, TrainBatch
from serl.recipes.spell.corpus import Cluster
from serl.recipes.spell.rewards import (Majority, parse_judgment, questioner_reward, responder_reward,
                                        verifier_majority, verifier_rewards, verifier_train_mask)

TRAINED_STATUSES = ("ok", "bad_format", "bad_ground")


@dataclass
class Question:
    cluster: Cluster
    evidence: list[int]                  # paragraph indices the questioner saw
    ask: Completion                      # the questioner's reply
    status: str = "bad_format"
    qa: dict | None = None               # {"question", "answer"} when parsed
    ground: float | None = None          # mean no-document score (grounding check)
    responses: list[Completion] = field(default_factory=list)
    answers: list[str | None] = field(default_factory=list)   # after "The answer is"
    rule: list[float] = field(default_factory=list)           # cover-EM per response
    judges: list[list[Completion]] = field(default_factory=list)  # k per response ([] if no answer)
    majorities: list[Majority | None] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)        # responder rewards
    reward: float | None = None          # questioner reward

    @property
    def mean_score(self) -> float:
        return sum(self.rewards) / len(self.rewards) if self.rewards else 0.0

    @property
    def informative(self) -> bool:
        return self.status == "ok" and 0.0 < self.mean_score < 1.0


def settle(q: Question) -> None:
    """Judgments -> majorities -> responder rewards -> questioner reward (in place)."""
    q.majorities, q.rewards = [], []
    for rule, judges in zip(q.rule, q.judges):
        maj = verifier_majority([parse_judgment(c.text) for c in judges]) if judges else None
        q.majorities.append(maj)
        q.rewards.append(responder_reward(rule, maj) if maj is not None else rule)
    if q.status == "ok":
        q.reward = questioner_reward("ok", q.mean_score)
    elif q.status in ("bad_format", "bad_ground"):
        q.reward = questioner_reward(q.status)
    else:
        q.reward = None


def spread(rewards: list[float]) -> bool:
    return len(rewards) > 1 and max(rewards) > min(rewards)


def verifier_groups(q: Question, band: tuple[float, float]) -> list[tuple[list[Completion], list[float]]]:
    """The (judgments, rewards) groups the verifier trains on: majority share within
    ``band`` and agreeing with the rule score, with some spread in the rewards."""
    out = []
    for rule, judges, maj in zip(q.rule, q.judges, q.majorities):
        if maj is None or not verifier_train_mask(maj, rule, band):
            continue
        rewards = verifier_rewards([parse_judgment(c.text) for c in judges], maj)
        if spread(rewards):
            out.append((judges, rewards))
    return out


@dataclass
class RoleGroups:
    """What one step trains on, per role: lists of (completions, rewards) groups."""
    questioner: list[tuple[Completion, float]] = field(default_factory=list)
    responder: list[tuple[list[Completion], list[float]]] = field(default_factory=list)
    verifier: list[tuple[list[Completion], list[float]]] = field(default_factory=list)

    def add(self, q: Question, band: tuple[float, float], max_responder: int) -> None:
        """Add the question's trainable samples; its responder group only while there is room."""
        if q.status in TRAINED_STATUSES and q.reward is not None and q.ask.token_ids:
            self.questioner.append((q.ask, q.reward))
        if q.status == "ok" and spread(q.rewards) and len(self.responder) < max_responder:
            self.responder.append((q.responses, q.rewards))
        self.verifier += verifier_groups(q, band)


def concat(batches: list[TrainBatch | None]) -> TrainBatch | None:
    """One batch with the rows of all of ``batches`` (None entries skipped)."""
    parts = [b for b in batches if b is not None and b.response_ids]
    if not parts:
        return None
    return TrainBatch(prompt_ids=[p for b in parts for p in b.prompt_ids],
                      response_ids=[r for b in parts for r in b.response_ids],
                      advantages=[a for b in parts for a in b.advantages])


def role_batches(groups: RoleGroups, group_batch) -> dict[str, TrainBatch | None]:
    """Per-role batches with advantages from ``group_batch(groups, rewards)`` (the run's
    estimator, group-normalised by default): responder within each question's samples,
    verifier within each response's judgments, questioner over the whole step's batch."""
    out = {"questioner": None, "responder": None, "verifier": None}
    if groups.questioner:
        out["questioner"] = group_batch([[c for c, _ in groups.questioner]], [[r for _, r in groups.questioner]])
    for role in ("responder", "verifier"):
        gs = getattr(groups, role)
        if gs:
            out[role] = group_batch([g for g, _ in gs], [r for _, r in gs])
    return out


def nonzero_rows(batch: TrainBatch | None) -> TrainBatch | None:
    """Drop rows whose advantage is zero everywhere (they would only cost compute)."""
    if batch is None:
        return None
    keep = [i for i, a in enumerate(batch.advantages) if bool(torch.any(a != 0))]
    return batch.subset(keep) if keep else None
