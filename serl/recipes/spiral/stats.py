"""Per-game, per-role statistics of a batch of SPIRAL episodes, from the learner's point of view."""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Sequence

from serl.recipes.base import truncated


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


def episode_metrics(turns: Sequence, episodes: Sequence, kinds: Sequence[str], learner: str = "current") -> dict[str, float]:
    """A step's metrics: per game and role (``summarize``), the overall invalid rate, response
    lengths and the opponent mix (``kinds``: one per game)."""
    out = {f"spiral/{k}": v for k, v in summarize(turns, episodes, learner).items() if "/opponent/" not in k}
    mine = [t for t in turns if t.policy == learner]
    lens = [len(t.output.token_ids) for t in mine]
    out["spiral/invalid_rate"] = sum(t.action is None for t in mine) / len(mine) if mine else 0.0
    out["spiral/learner_turns"] = len(mine)
    out["response/length_mean"] = sum(lens) / len(lens) if lens else 0.0
    out["response/truncated_frac"] = sum(truncated(t.output) for t in mine) / max(len(mine), 1)
    for kind, c in Counter(kinds).items():
        out[f"spiral/opponent/{kind}"] = c / len(kinds)
    return out
