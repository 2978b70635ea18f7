"""One SPELL question's life, as data: what the questioner wrote, how it was checked,
the responder's samples and the verifier's judgments, and the rewards of all three roles.

The recipe fills these in stage by stage with the generator; everything here is pure, so it
is tested without a model. The rules are SPELL's (Tongyi-Zhiwen 2025; numbers from its public
trainer, the code is ours): answer scoring (:mod:`serl.recipes.spell.qa`), the verifier's majority
(:mod:`serl.recipes.spell.judge`), the difficulty reward (:mod:`serl.recipes.spell.difficulty`), and here:
-1 for bad format, -0.5 for ``bad_ground`` (the no-document responder scores >= 0.1). Statuses:
``ok``          parsed, new, grounded: the responder answered it;
``bad_format``  no JSON question/answer block (questioner reward -1, trained);
``bad_ground``  answerable without the documents (reward -0.5, trained; not answered);
``too_long``    its answer is too long for cover-EM (dropped, not trained, as upstream);
``repeated``    too close (ROUGE-L) to an earlier question on its cluster (dropped).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from serl.engines.base import Completion, TrainBatch
from serl.recipes.spell import role_batch
from serl.recipes.spell.corpus import Cluster
from serl.recipes.spell.difficulty import QUESTIONER_SIGMA, difficulty_reward
from serl.recipes.spell.json_extract import extract_json_fields
from serl.recipes.spell.judge import (
    Majority,
    parse_judgment,
    responder_reward,
    verifier_majority,
    verifier_rewards,
    verifier_train_mask,
)

TRAINED_STATUSES = ("ok", "bad_format", "bad_ground")
GROUNDING_THRESHOLD = 0.1
MAX_ANSWER_CHARS = 200  # longer answers are "too_long" (upstream drops > 40 tokens unpenalised)


def parse_questioner(text: str, max_answer_chars: int = MAX_ANSWER_CHARS) -> tuple[str, dict | None]:
    """(status, qa): ``("ok", qa)``, ``("bad_format", None)`` or ``("too_long", qa)``.

    ``too_long`` answers are dropped without penalty, as upstream does for answers
    over 40 tokens: long answers make cover-EM meaningless rather than being wrong.
    """
    qa = extract_json_fields(text, ("question", "answer"), numeric=("answer",))
    if qa is None:
        return "bad_format", None
    return ("too_long" if len(qa["answer"]) > max_answer_chars else "ok"), qa


def is_bad_ground(no_doc_score: float, threshold: float = GROUNDING_THRESHOLD) -> bool:
    """Answerable without the documents: the no-document mean score reaches ``threshold``."""
    return no_doc_score >= threshold


def questioner_reward(
    status: str, mean_score: float | None = None, sigma: float = QUESTIONER_SIGMA, mapping: str = "gaussian"
) -> float:
    """-1 bad format, -0.5 bad_ground, else :func:`difficulty_reward` of the mean score."""
    if status in ("bad_format", "bad_ground"):
        return -1.0 if status == "bad_format" else -0.5
    if status != "ok":
        raise ValueError(f"unknown questioner status {status!r}; expected one of {TRAINED_STATUSES}")
    if mean_score is None:
        raise ValueError("a questioner with status 'ok' needs the responder's mean score")
    return difficulty_reward(mean_score, sigma, mapping)


@dataclass
class Question:
    cluster: Cluster
    evidence: list[int]  # paragraph indices the questioner saw
    ask: Completion  # the questioner's reply
    status: str = "bad_format"
    qa: dict | None = None  # {"question", "answer"} when parsed
    ground: float | None = None  # mean no-document score (grounding check)
    responses: list[Completion] = field(default_factory=list)
    answers: list[str | None] = field(default_factory=list)  # after "The answer is"
    rule: list[float] = field(default_factory=list)  # cover-EM per response
    judges: list[list[Completion]] = field(default_factory=list)  # k per response ([] if no answer)
    majorities: list[Majority | None] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)  # responder rewards
    reward: float | None = None  # questioner reward

    @property
    def mean_score(self) -> float:
        return sum(self.rewards) / len(self.rewards) if self.rewards else 0.0

    @property
    def informative(self) -> bool:
        return self.status == "ok" and 0.0 < self.mean_score < 1.0


def settle(q: Question, mapping: str = "gaussian", responder: str = "max") -> None:
    """Judgments -> majorities -> responder rewards -> questioner reward (in place). The
    responder's reward: ``max`` of the rule score and the verifier's majority (SPELL), or
    ``rule``, the rule score alone (the majorities are still kept for the verifier)."""
    if responder not in ("max", "rule"):
        raise ValueError(f"unknown responder reward {responder!r}; expected 'max' or 'rule'")
    q.majorities, q.rewards = [], []
    for rule, judges in zip(q.rule, q.judges):
        maj = verifier_majority([parse_judgment(c.text) for c in judges]) if judges else None
        q.majorities.append(maj)
        q.rewards.append(responder_reward(rule, maj) if maj is not None and responder == "max" else rule)
    if q.status == "ok":
        q.reward = questioner_reward("ok", q.mean_score, mapping=mapping)
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

    def by_role(self) -> dict[str, list[tuple[list[Completion], list[float]]]]:
        """The groups of each role in training order; the questioner's replies (one per
        cluster) are a single group over the step, as SPELL normalises them over the batch."""
        asked = [([c for c, _ in self.questioner], [r for _, r in self.questioner])] if self.questioner else []
        return {"questioner": asked, "responder": self.responder, "verifier": self.verifier}


def role_batches(groups: RoleGroups, group_batch) -> dict[str, TrainBatch | None]:
    """The three roles' batches (:func:`serl.recipes.spell.role_batch.role_batches`), advantages from
    ``group_batch(groups, rewards)`` (the run's estimator): responder within each question's
    samples, verifier within each response's judgments, questioner over the whole step's batch."""
    return role_batch.role_batches(groups.by_role(), group_batch)


def _share(num, den) -> float:
    return num / den if den else float("nan")  # nothing to measure is NaN (logged as null), not 0


def role_metrics(qs: list[Question], groups: RoleGroups) -> dict[str, float]:
    """Per-role rates over one step's questions (``questioner/``, ``responder/``, ``verifier/``)."""
    n = len(qs)
    checked = [q for q in qs if q.ground is not None]
    answered = [q for q in qs if q.status == "ok"]
    rewarded = [q.reward for q in qs if q.reward is not None]
    responses = [(r, w) for q in answered for r, w in zip(q.rule, q.rewards)]
    judgments = [
        (j, maj, rule)
        for q in answered
        for js, maj, rule in zip(q.judges, q.majorities, q.rule)
        for j in (parse_judgment(c.text) for c in js)
    ]
    valid = [(j, maj, rule) for j, maj, rule in judgments if j != -1]
    return {
        "questioner/valid_json": _share(sum(q.status != "bad_format" for q in qs), n),
        "questioner/bad_ground": _share(sum(q.status == "bad_ground" for q in checked), len(checked)),
        "questioner/informative": _share(sum(q.informative for q in answered), len(answered)),
        "questioner/repeated": _share(sum(q.status == "repeated" for q in qs), n),
        "questioner/too_long": _share(sum(q.status == "too_long" for q in qs), n),
        "questioner/reward_mean": _share(sum(rewarded), len(rewarded)),
        "questioner/asked": float(n),
        "responder/accuracy": _share(sum(r for r, _ in responses), len(responses)),
        "responder/reward_mean": _share(sum(w for _, w in responses), len(responses)),
        "responder/verifier_lift": _share(sum(w > r for r, w in responses), len(responses)),
        "responder/no_answer": _share(sum(a is None for q in answered for a in q.answers), len(responses)),
        "verifier/agreement": _share(sum(float(j) == rule for j, _, rule in valid), len(valid)),
        "verifier/majority_agreement": _share(
            sum(maj is not None and j == maj.label for j, maj, _ in valid), len(valid)
        ),
        "verifier/bad_format": _share(len(judgments) - len(valid), len(judgments)),
        "train/responder_groups": float(len(groups.responder)),
        "train/verifier_groups": float(len(groups.verifier)),
    }
