"""A SPIRAL step's metrics over its episodes, from the learner's point of view."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from serl.recipes.base import truncated
from serl.recipes.spiral.games.stats import summarize


def episode_metrics(
    turns: Sequence, episodes: Sequence, kinds: Sequence[str], learner: str = "current"
) -> dict[str, float]:
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
