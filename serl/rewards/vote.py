"""Majority-vote self-reward and rule reward for groups of responses.

Majority vote (one prompt's group of n answers):

* Answers are first merged by their cheap normal form (``normalize``), keeping
  the order of first appearance; the distinct forms are then clustered in a
  worker: each joins the first cluster whose representative (first member) is
  equivalent, else opens a new one.  With k clusters that is at most n*k checks
  (the reference implementation compared all n^2 pairs).
* The largest cluster is the majority: its members get reward 1, all others 0.
* No answer (None) gets 0 and is never counted in any cluster, so it can never
  be the majority; a group with no answers at all gets all zeros, label None.
  An empty answer (nothing but presentation: ``\\text{}``, ``.``, ``$$``, ``\\,``,
  ``{}``; the rule is :func:`serl.rewards.normalize.is_empty`) is no answer:
  ``extract_answer`` already returns None for it, and an empty answer handed
  to the vote directly is counted as None too (``n_no_answer``, reward 0).
* Tie rule: among clusters of the largest size, the one whose first member
  appears earliest in the group wins.  ``GroupScore.tie`` records that a tie
  was broken.
* ``agreement`` = majority size / n (n counts the unanswered too), the
  quantity the difficulty filter reads.

Rule reward: each answer is compared with the label (gold side of math-verify);
``agreement`` is then the accuracy.  Clusters are still counted (``n_clusters``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from serl.rewards.extract import extract_answer, normalize_label
from serl.rewards.normalize import is_blank, normalize

MODES = ("majority", "rule", "auto")


@dataclass
class GroupScore:
    rewards: list[float]
    answers: list[str | None]
    label: str | None  # majority answer (pseudo-label) or the given label
    agreement: float  # majority share for a vote, accuracy for the rule reward
    n_clusters: int
    n_no_answer: int
    tie: bool
    source: str  # "majority" | "rule"
    cluster_sizes: list[int] = field(default_factory=list)  # in order of first appearance


def _dedup(answers: list[str | None]) -> tuple[list[str], list[int]]:
    """Distinct normal forms in order of first appearance; per answer its index
    (-1 = no answer: None or empty)."""
    uniques: list[str] = []
    where: dict[str, int] = {}
    index: list[int] = []
    for a in answers:
        key = None if a is None else normalize(a)
        if a is None or key is None or is_blank(key):
            index.append(-1)
            continue
        if key not in where:
            where[key] = len(uniques)
            uniques.append(a)
        index.append(where[key])
    return uniques, index


def _group_job(uniques: list[str], label: str | None) -> dict:
    strings = list(uniques)
    job: dict = {"kind": "group", "strings": strings, "label": None}
    if label is not None:
        job["label"] = len(strings)
        strings.append(label)
    return job


def _needs_worker(uniques: list[str], label: str | None) -> bool:
    return len(uniques) > 1 or (label is not None and len(uniques) > 0)


def _trivial_result(uniques: list[str], label: str | None) -> dict:
    return {"cluster_of": list(range(len(uniques))), "label_match": None}


def _score(answers, index, uniques, result, label, source) -> GroupScore:
    answers = [None if k < 0 else a for a, k in zip(answers, index)]  # an empty answer is none
    n = len(answers)
    n_none = sum(1 for k in index if k < 0)
    cluster_of = result["cluster_of"][: len(uniques)]
    n_clusters = (max(cluster_of) + 1) if cluster_of else 0
    sizes = [0] * n_clusters
    for k in index:
        if k >= 0:
            sizes[cluster_of[k]] += 1
    if source == "rule":
        match = result["label_match"] or [False] * len(uniques)
        rewards = [1.0 if k >= 0 and match[k] else 0.0 for k in index]
        return GroupScore(
            rewards=rewards,
            answers=list(answers),
            label=label,
            agreement=(sum(rewards) / n) if n else 0.0,
            n_clusters=n_clusters,
            n_no_answer=n_none,
            tie=False,
            source="rule",
            cluster_sizes=sizes,
        )
    if not sizes:
        return GroupScore(
            rewards=[0.0] * n,
            answers=list(answers),
            label=None,
            agreement=0.0,
            n_clusters=0,
            n_no_answer=n_none,
            tie=False,
            source="majority",
            cluster_sizes=[],
        )
    best = max(sizes)
    # Clusters are numbered in order of first appearance, so the lowest index
    # among the largest is the one whose first member came first.
    winner = sizes.index(best)
    tie = sizes.count(best) > 1
    rewards = [1.0 if k >= 0 and cluster_of[k] == winner else 0.0 for k in index]
    pseudo = uniques[cluster_of.index(winner)]
    return GroupScore(
        rewards=rewards,
        answers=list(answers),
        label=pseudo,
        agreement=best / n,
        n_clusters=n_clusters,
        n_no_answer=n_none,
        tie=tie,
        source="majority",
        cluster_sizes=sizes,
    )


class GroupTooLarge(ValueError):
    """A group has more distinct answers than the caller allows (checked before any work)."""


def _score_answer_groups(
    groups: list[list[str | None]],
    labels: list[str | None],
    checker,
    max_distinct: int | None = None,
    time_budget: float | None = None,
) -> list[GroupScore]:
    """Score groups of extracted answers; a label switches that group to the rule reward.

    ``max_distinct``: refuse (``GroupTooLarge``) a group with more distinct answers,
    before any check runs: a vote over k distinct answers that are not plain numbers
    costs up to k^2/2 math-verify checks.  ``time_budget``: seconds the pool may spend
    on the batch (``EquivalenceChecker.run_jobs``); past it the pool raises.
    """
    prepared = []
    jobs = []
    for g, (answers, label) in enumerate(zip(groups, labels)):
        uniques, index = _dedup(answers)
        if max_distinct is not None and len(uniques) > max_distinct:
            raise GroupTooLarge(f"group {g} has {len(uniques)} distinct answers; at most {max_distinct} are voted")
        job = None
        if _needs_worker(uniques, label):
            job = _group_job(uniques, label)
            jobs.append(job)
        prepared.append((answers, index, uniques, label, job))
    if not jobs:
        results: Iterator = iter([])
    elif time_budget is not None:
        results = iter(checker.run_jobs(jobs, time_budget=time_budget))
    else:
        results = iter(checker.run_jobs(jobs))
    out = []
    for answers, index, uniques, label, job in prepared:
        if job is None:
            res = _trivial_result(uniques, label)
        else:
            res = next(results)  # the pool raises rather than return a job it could not finish
        out.append(_score(answers, index, uniques, res, label, "rule" if label is not None else "majority"))
    return out


def majority_vote(answers: list[str | None], checker) -> GroupScore:
    """Majority-vote rewards for one group of extracted answers."""
    return _score_answer_groups([list(answers)], [None], checker)[0]


def rule_reward(answers: list[str | None], label: str | None, checker) -> GroupScore:
    """Rewards 1 for answers equivalent to ``label`` (``#### N``, ``\\boxed{}`` or plain)."""
    gold = normalize_label(label)
    if gold is None:
        raise ValueError("rule_reward needs a label; got an empty one")
    return _score_answer_groups([list(answers)], [gold], checker)[0]


def score_groups(
    responses: list[list[str]],
    labels: list[str | None] | None,
    checker,
    mode: str = "majority",
    fallback: str = "number",
    *,
    max_distinct: int | None = None,
    time_budget: float | None = None,
) -> list[GroupScore]:
    """Extract answers from each response and score every group in one batch.

    ``mode``: ``"majority"`` ignores labels; ``"rule"`` needs a label for every
    group; ``"auto"`` uses the label where there is one and the vote elsewhere.
    All groups go to the pool together, one job per group, so the workers run
    in parallel.  ``max_distinct`` and ``time_budget``: see ``_score_answer_groups``.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if labels is not None and len(labels) != len(responses):
        raise ValueError(f"labels has {len(labels)} entries for {len(responses)} groups")
    golds: list[str | None] = [None] * len(responses)
    if mode != "majority":
        if labels is None:
            if mode == "rule":
                raise ValueError("mode='rule' needs labels")
        else:
            golds = [normalize_label(x) for x in labels]
        if mode == "rule":
            missing = [i for i, g in enumerate(golds) if g is None]
            if missing:
                raise ValueError(f"mode='rule' but group(s) {missing[:10]} have no label")
    groups = [[extract_answer(r, fallback) for r in group] for group in responses]
    return _score_answer_groups(groups, golds, checker, max_distinct, time_budget)


def maj_at_k(groups: list[list[str | None]], labels: list[str | None], checker) -> list[bool]:
    """maj@k for evaluation: the majority answer of each group equals its label.

    Same clustering code as the training reward (``majority_vote``).
    """
    votes = _score_answer_groups([list(g) for g in groups], [None] * len(groups), checker)
    pairs, where = [], []
    for k, (v, lab) in enumerate(zip(votes, labels)):
        gold = normalize_label(lab)
        if v.label is not None and gold is not None:
            where.append(k)
            pairs.append((gold, v.label))
    out = [False] * len(groups)
    for k, ok in zip(where, checker.equal_many(pairs)):
        out[k] = ok
    return out


def summarize(scores: list[GroupScore]) -> dict[str, float]:
    """Batch metrics for logging."""
    n = len(scores) or 1
    samples = sum(len(s.rewards) for s in scores) or 1
    return {
        "reward_mean": sum(sum(s.rewards) for s in scores) / samples,
        "agreement_mean": sum(s.agreement for s in scores) / n,
        "no_answer_rate": sum(s.n_no_answer for s in scores) / samples,
        "clusters_mean": sum(s.n_clusters for s in scores) / n,
        "ties": float(sum(s.tie for s in scores)),
        "groups_rule": float(sum(s.source == "rule" for s in scores)),
        "groups_majority": float(sum(s.source == "majority" for s in scores)),
    }
