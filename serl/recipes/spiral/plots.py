"""SPIRAL's figure in `serl report`: win and invalid-move rates, role baselines, opponents."""

from __future__ import annotations

from serl.report.plots import panels_plot


def plot_games(run, claimed: set[str]):
    """Self-play on games (SPIRAL): win rate and invalid moves per game and role, baselines, opponents."""
    s = run.series
    pick = lambda pred: sorted(k for k in s if k.startswith("spiral/") and pred(k))  # noqa: E731
    groups = [
        ("Win rate of the learner, by game and seat", "win rate", pick(lambda k: k.endswith("/win_rate"))),
        ("Invalid-move rate of the learner", "share of its moves", pick(lambda k: k.endswith("invalid_rate"))),
        ("Role baselines (RAE, EMA of returns)", "baseline", pick(lambda k: k.startswith("spiral/baseline/"))),
        ("Opponent mix", "share of games", pick(lambda k: k.startswith("spiral/opponent/"))),
    ]
    panels = [
        (
            title,
            ylabel,
            [
                (
                    k.removeprefix("spiral/")
                    .removeprefix("baseline/")
                    .removeprefix("opponent/")
                    .replace("/win_rate", "")
                    .replace("/invalid_rate", ""),
                    s[k],
                )
                for k in keys
            ],
        )
        for title, ylabel, keys in groups
        if keys
    ]
    if not panels:
        return None
    claimed.update(k for _, _, keys in groups for k in keys)
    return panels_plot("Games", panels, cols=2 if len(panels) > 2 else 1)
