"""serl/recipes/spell/role_batch.py: each role's groups become its own batch (advantages within each group, never
across roles), then the roles' batches, without their all-zero rows, are joined in role order."""

from types import SimpleNamespace

import pytest
import torch

from serl.engines.base import Completion, TrainBatch
from serl.recipes.base import Recipe
from serl.recipes.spell.role_batch import join_roles, role_batches


def comp(first: int, n: int = 1) -> Completion:
    """A completion told apart by its first token id, ``n`` tokens long, prompt [9, first]."""
    return Completion(str(first), [first] * n, [9, first])


def estimator(name: str):
    """The run's estimator as the recipes call it (``Recipe.group_batch``)."""
    recipe = SimpleNamespace(cfg=SimpleNamespace(advantage_estimator=name, gamma=1.0))
    return lambda groups, rewards: Recipe.group_batch(recipe, groups, rewards)


def test_role_batches_calls_the_estimator_once_per_role_with_its_groups():
    calls = []

    def group_batch(groups, rewards):
        calls.append(([[c.token_ids[0] for c in g] for g in groups], rewards))
        return f"batch {len(calls)}"

    out = role_batches(
        {"b": [([comp(1), comp(2)], [1.0, 0.0]), ([comp(3)], [0.5])], "a": [], "c": [([comp(4)], [2.0])]}, group_batch
    )
    assert list(out) == ["b", "a", "c"]  # the roles' order as given
    assert out == {"b": "batch 1", "a": None, "c": "batch 2"}  # a role without groups is not estimated
    assert calls == [([[1, 2], [3]], [[1.0, 0.0], [0.5]]), ([[4]], [[2.0]])]


def test_by_hand_dr_grpo():
    """dr_grpo: advantage = reward - its group's mean, on every token; a group of one member or
    of equal rewards gets 0.
    asker, one group [1, -1, 0]: mean 0 -> [1, -1, 0]; the 0 row is dropped.
    answerer, groups [1, 1] (no spread -> [0, 0], dropped) and [1, 0]: mean 0.5 -> [0.5, -0.5].
    Pooled with the asker's (one group of [1, -1, 0, 1, 0]: mean 0.2) the answerer's would be
    [0.8, -0.2]: each role keeps its own baseline. judge: no groups -> 0 sequences."""
    groups = {
        "asker": [([comp(1), comp(2, 2), comp(3)], [1.0, -1.0, 0.0])],
        "answerer": [([comp(4), comp(5)], [1.0, 1.0]), ([comp(6, 3), comp(7)], [1.0, 0.0])],
        "judge": [],
    }
    parts = role_batches(groups, estimator("dr_grpo"))
    adv = {r: [float(a[0]) for a in parts[r].advantages] for r in ("asker", "answerer")}
    assert adv == {"asker": [1.0, -1.0, 0.0], "answerer": [0.0, 0.0, 0.5, -0.5]}
    assert parts["judge"] is None
    metrics = {"before": 1.0}
    batch = join_roles(parts, metrics)
    assert list(metrics.items()) == [
        ("before", 1.0),
        ("train/asker_seqs", 2),
        ("train/answerer_seqs", 2),
        ("train/judge_seqs", 0),
    ]
    assert batch.response_ids == [[1], [2, 2], [6, 6, 6], [7]]  # role order, then the order within each role
    assert batch.prompt_ids == [[9, 1], [9, 2], [9, 6], [9, 7]]
    assert [a.tolist() for a in batch.advantages] == [[1.0], [-1.0, -1.0], [0.5, 0.5, 0.5], [-0.5]]


def test_by_hand_group_norm():
    """group_norm: (reward - mean) / (sample std + 1e-6). Rewards [1, 1, 0]: mean 2/3, sample std
    sqrt(((1/3)^2 * 2 + (2/3)^2) / 2) = sqrt(1/3) -> [0.57735, 0.57735, -1.15470]."""
    parts = role_batches({"verifier": [([comp(1), comp(2), comp(3)], [1.0, 1.0, 0.0])]}, estimator("group_norm"))
    metrics = {}
    batch = join_roles(parts, metrics)
    s = (1 / 3) ** 0.5
    assert [float(a[0]) for a in batch.advantages] == pytest.approx([(1 / 3) / s, (1 / 3) / s, -(2 / 3) / s], abs=1e-5)
    assert [float(a[0]) for a in batch.advantages] == pytest.approx([0.57735, 0.57735, -1.15470], abs=1e-5)
    assert metrics == {"train/verifier_seqs": 3}


def test_nothing_to_train_is_none_with_zero_counts():
    flat = TrainBatch([[0]], [[1, 2]], [torch.zeros(2)])  # zero at every token: dropped
    metrics = {}
    assert join_roles({"a": None, "b": flat}, metrics) is None
    assert metrics == {"train/a_seqs": 0, "train/b_seqs": 0}
    assert join_roles({}, {}) is None
