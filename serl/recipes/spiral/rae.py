"""Role-conditioned advantage estimation (RAE), after SPIRAL (Liu et al., 2025).

One exponential-moving-average baseline ``b`` per (game, role), where role is the seat (0 moves first).
For each episode's return ``R`` of a role, the advantage is ``A = R - b`` with ``b`` from before this
step's update; then ``b <- alpha * b + (1 - alpha) * mean(R)`` over that role's episodes of the step
(alpha = 0.95 upstream). Every turn of that player in that episode gets ``A * gamma**k``, k the number of
that player's later turns in the episode (spiral-rl's ``gamma``, 1 by default: every turn the same ``A``).

This is what spiral-rl 0.2.0 (PyPI; its Tinker trainer) does: advantages use the baseline read before
the batch, then each (game, role) EMA takes one update per batch from that role's mean raw return.
The repository's earlier oat-based ``train_spiral.py`` (version 0.0.1) differs: it updates a per-role
EMA once per episode, in the order episodes are prepared, so later episodes of a batch see a baseline
that already moved. docs/algorithms.md has the comparison. Baselines start at ``initial`` (0: the
value of a fair zero-sum game, as upstream) and a (game, role) pair seen for the first time starts
there too.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence


class RoleBaselines:
    """EMA baselines per (game, role); ``advantages`` is the one call a training step needs."""

    def __init__(self, alpha: float = 0.95, initial: float = 0.0) -> None:
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"RAE alpha must be in [0, 1], got {alpha}")
        self.alpha = float(alpha)
        self.initial = float(initial)
        self.values: dict[tuple[str, int], float] = {}

    def baseline(self, game: str, role: int) -> float:
        return self.values.get((game, int(role)), self.initial)

    def advantages(self, returns: Sequence[tuple[str, int, float]], update: bool = True) -> list[float]:
        """``A = R - b`` for each ``(game, role, R)`` (b before the update), then the step's EMA update."""
        out = [float(r) - self.baseline(g, role) for g, role, r in returns]
        if update:
            self.update(returns)
        return out

    def update(self, returns: Sequence[tuple[str, int, float]]) -> None:
        groups: dict[tuple[str, int], list[float]] = defaultdict(list)
        for g, role, r in returns:
            groups[(g, int(role))].append(float(r))
        for key, rs in groups.items():
            b = self.values.get(key, self.initial)
            self.values[key] = self.alpha * b + (1.0 - self.alpha) * sum(rs) / len(rs)

    def state_dict(self) -> dict:
        """Plain JSON-able state: ``{"alpha", "initial", "values": {"game/role": b}}``."""
        return {
            "alpha": self.alpha,
            "initial": self.initial,
            "values": {f"{g}/{role}": b for (g, role), b in sorted(self.values.items())},
        }

    def load_state_dict(self, state: dict) -> None:
        try:
            alpha, initial, values = float(state["alpha"]), float(state["initial"]), state["values"]
            parsed = {}
            for key, b in values.items():
                game, role = key.rsplit("/", 1)
                parsed[(game, int(role))] = float(b)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"RAE state: malformed ({type(e).__name__}: {e})") from e
        self.alpha, self.initial, self.values = alpha, initial, parsed


def turn_advantages(
    turns: Sequence,
    episodes: Sequence,
    learner: str = "current",
    baselines: RoleBaselines | None = None,
    gamma: float = 1.0,
) -> list[tuple[object, float]]:
    """``(turn, A)`` for every turn the ``learner`` played (``serl.recipes.spiral.games.lockstep`` Turn/Episode records).

    Each seat the learner held in an episode is one return ``R`` of role = seat. With ``baselines``
    A = R - b(game, role) and the baselines take this step's update; without, A = R - mean of all the
    learner's returns in the batch (the plain batch baseline of the no-RAE control). ``turns`` are in
    play order; a turn followed by k more of the same player's in its episode gets ``A * gamma**k``."""
    keys = [(ep.index, role) for ep in episodes for role in (0, 1) if ep.seats[role] == learner]
    by_index = {ep.index: ep for ep in episodes}
    returns = [(by_index[i].game, role, by_index[i].rewards[role]) for i, role in keys]
    if baselines is not None:
        adv = baselines.advantages(returns)
    else:
        mean = sum(r for _, _, r in returns) / len(returns) if returns else 0.0
        adv = [r - mean for _, _, r in returns]
    table = dict(zip(keys, adv))
    mine = [t for t in turns if t.policy == learner]
    left = Counter((t.episode, t.player) for t in mine)  # turns still to come, this one included
    out = []
    for t in mine:
        left[(t.episode, t.player)] -= 1
        out.append((t, table[(t.episode, t.player)] * gamma ** left[(t.episode, t.player)]))
    return out
