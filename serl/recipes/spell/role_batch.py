"""One policy trained in several roles by one update (SPELL: questioner, responder, verifier).

The recipe says what each role's groups are (one prompt's samples and the reward of each);
here each role's groups become that role's batch, with advantages from the run's estimator
taken within each group, so one role's rewards never set another's baseline; then the roles'
batches, each without its sequences whose advantage is zero throughout, are joined in role
order into the one ``TrainBatch`` the run loop (``serl.run.loop``) hands the learner:

    groups = {"questioner": [...], "responder": [...], "verifier": [...]}  # (completions, rewards) each
    batch = join_roles(role_batches(groups, self.group_batch), metrics)   # and train/<role>_seqs
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from serl.engines.base import Completion, TrainBatch

Group = tuple[Sequence[Completion], Sequence[float]]  # one prompt's samples, one reward each


def role_batches(groups: Mapping[str, Sequence[Group]], group_batch: Callable) -> dict[str, TrainBatch | None]:
    """Per role, in the order of ``groups``: one batch of all its groups, with advantages from
    ``group_batch(completion groups, reward groups)`` (``Recipe.group_batch``: the run's
    estimator, within each group); None for a role without groups."""
    return {role: group_batch([c for c, _ in gs], [r for _, r in gs]) if gs else None for role, gs in groups.items()}


def join_roles(batches: Mapping[str, TrainBatch | None], metrics: dict) -> TrainBatch | None:
    """The roles' batches joined in their order, each without its all-zero rows (they would only
    cost compute); ``metrics["train/<role>_seqs"]``: the sequences each role puts in (0 for
    none). None when no role has any."""
    kept = []
    for role, b in batches.items():
        b = None if b is None else b.nonzero_rows()
        metrics[f"train/{role}_seqs"] = 0 if b is None else len(b.response_ids)
        kept.append(b)
    return TrainBatch.concat(kept)
