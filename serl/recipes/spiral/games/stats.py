"""Per-game, per-role outcome statistics of a batch of played episodes (``serl.recipes.spiral.games.lockstep``),
from one policy's point of view."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence


def summarize(turns: Sequence, episodes: Sequence, learner: str = "current") -> dict[str, float]:
    """Flat metrics ``{game}/role{r}/{name}`` over the episodes where ``learner`` held seat ``r``:
    win/loss/draw rates, invalid_rate (share of the learner's moves that were invalid), mean_turns
    (moves per episode), response_chars (mean length of the learner's responses), reward (mean) and
    opponent mix ``opponent/{id}`` (share of those episodes). A self-play episode counts for both roles."""
    eps = defaultdict(list)
    for ep in episodes:
        for role in (0, 1):
            if ep.seats[role] == learner:
                eps[(ep.game, role)].append(ep)
    moves = defaultdict(list)
    for t in turns:
        if t.policy == learner:
            moves[(t.game, t.player)].append(t)
    out: dict[str, float] = {}
    for (game, role), group in sorted(eps.items()):
        p = f"{game}/role{role}/"
        n = len(group)
        outcomes = Counter(ep.outcome(role) for ep in group)
        for name in ("win", "loss", "draw"):
            out[p + f"{name}_rate"] = outcomes[name] / n
        mine = moves[(game, role)]
        out[p + "invalid_rate"] = sum(t.action is None for t in mine) / len(mine) if mine else 0.0
        out[p + "response_chars"] = sum(len(t.response) for t in mine) / len(mine) if mine else 0.0
        out[p + "mean_turns"] = sum(ep.turns for ep in group) / n
        out[p + "reward"] = sum(ep.rewards[role] for ep in group) / n
        for opp, c in Counter(ep.seats[1 - role] for ep in group).items():
            out[p + f"opponent/{opp}"] = c / n
    return out
