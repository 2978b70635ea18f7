"""What a run's report shows, by recipe: each recipe's config declares ``REPORT``, its
figures (stems of ``serl.report.plots.PLOTS``, and builders of its own that live in its
folder), the metrics of summary.md's main table and those of the line printed after each
step. The shared ones come with every recipe. A run whose recipe is unknown (no config, an
old or foreign run) gets every recipe's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Report:
    plots: tuple[str, ...] = ()  # figures, drawn in PLOTS' order
    main: tuple[str, ...] = ()  # summary.md's main table
    line: tuple[tuple[str, str], ...] = ()  # (metric, label) printed after each step
    figures: tuple[tuple[str, Callable], ...] = ()  # (file stem, builder): the recipe's own figures

    def __add__(self, other: Report) -> Report:
        return Report(
            _union(self.plots, other.plots),
            _union(self.main, other.main),
            tuple(dict.fromkeys(self.line + other.line)),
            tuple(dict(self.figures + other.figures).items()),
        )


SHARED = Report(
    plots=("kl", "entropy", "loss", "response_length", "time", "eval"),
    main=("actor/entropy", "loss/policy", "response/length_mean", "time/step"),
    line=(("loss/policy", "loss"),),
)


def _union(a: tuple, b: tuple) -> tuple:
    return tuple(dict.fromkeys(a + b))


def of_recipe(name: str | None) -> Report | None:
    """The recipe's report (its ``REPORT`` plus the shared one); None for an unknown recipe."""
    from serl.config.registry import config_class, recipe_names

    if name not in recipe_names():
        return None
    return getattr(config_class(name), "REPORT", Report()) + SHARED


def of_all() -> Report:
    """Every recipe's report together (a run whose recipe is not known)."""
    from serl.config.registry import recipe_names

    out = Report()
    for name in recipe_names():
        out = out + (of_recipe(name) or Report())
    return out
