"""The collapse guard's decision rule (``serl.run.guard``), pure Python so that
``experiments/guard/simulate.py`` runs this very code without torch.

Each check compares the policy's per-item probe outcomes with those of the best check so far
(a*, its step s*). A check is bad when its agreement is at least ``margin`` below a* and the
one-sided exact McNemar test of that drop gives p below the check's level; ``patience`` bad
checks in a row fire the guard.

The check's level is where the two rules differ (docs/guard.md, "The rule"):
  - ``per_check`` (serl before issue 61): every check tests at ``alpha``. Over 15 looks against
    a running maximum that is not a 5 % false-alarm rate per run but 40 % (50 looks: 90 %),
    by experiments/guard/simulate.py;
  - ``spent`` (the default): ``alpha`` is the false-alarm budget of the whole run, spread
    evenly over its planned checks (Bonferroni: each tests at alpha / checks). Bonferroni
    alone is not enough here, because the best check is the luckiest of all so far and a
    later check is compared with it (a selection the McNemar test does not know about):
    the default ``patience`` of 2 asks for a second bad check in a row before acting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

RULES = ("spent", "per_check")
EPS = 1e-9  # agreements are fractions of the probe: compare them without float noise


@dataclass
class Rule:
    margin: float = 0.10
    patience: int = 2
    alpha: float = 0.05
    rule: str = "spent"
    checks: int = 1  # the planned checks ``spent`` spreads alpha over

    def level(self) -> float:
        """The p-value a single check must fall below (alpha 1: no test, under either rule)."""
        return self.alpha / max(1, self.checks) if self.rule == "spent" and self.alpha < 1 else self.alpha


def planned_checks(steps: int, every: int) -> int:
    """Checks in a run of ``steps`` steps: step 0, every ``every`` steps, and the last step."""
    return 1 + steps // every + (1 if steps % every else 0)


@dataclass
class GuardState:
    best: float | None = None  # best agreement so far (a*)
    best_step: int = -1  # its step (s*); its policy is in RUN_DIR/guard_best
    best_items: list = field(default_factory=list)  # per-probe-item 0/1 at s*, for McNemar
    below: int = 0  # bad checks in a row
    fired: bool = False
    fired_step: int = -1  # the first firing
    rollbacks: int = 0
    stopped: bool = False  # the guard ended the run (a resume trains no further)
    lr_scale: float = 1.0
    checks: int = 0
    rule: dict = field(default_factory=dict)  # the rule this run decides by (a resume must keep it)
    last_answers: list = field(default_factory=list)  # the previous check's greedy answers (flip rate)


def lost_gained(before: list[int], now: list[int]) -> tuple[int, int]:
    """Items that agreed before but not now (b), and the reverse (c)."""
    b = sum(1 for x, y in zip(before, now) if x and not y)
    c = sum(1 for x, y in zip(before, now) if y and not x)
    return b, c


@lru_cache(maxsize=4096)
def binom_tail(b: int, c: int) -> float:
    """P(X >= b) for X ~ Binomial(b + c, 1/2); 1.0 when b + c = 0."""
    n = b + c
    return sum(math.comb(n, k) for k in range(b, n + 1)) / 2**n if n else 1.0


def drop_p(before: list[int], now: list[int]) -> float:
    """One-sided exact McNemar: P(X >= b) for X ~ Binomial(b + c, 1/2), where b items agreed
    before but not now and c the reverse; 1.0 when none changed."""
    return binom_tail(*lost_gained(before, now))


def judge(st: GuardState, rule: Rule, step: int, score: float, items: list[int], frozen: bool = False) -> str:
    """Update ``st`` with one check; returns "best", "hold", "bad" or "fire". ``frozen``: the
    best is kept as it is (watch mode after firing)."""
    st.checks += 1
    if st.best is None or (score > st.best + EPS and not frozen):
        st.best, st.best_step, st.best_items, st.below = score, step, list(items), 0
        return "best"
    bad = score <= st.best - rule.margin + EPS and drop_p(st.best_items, items) < rule.level()
    st.below = st.below + 1 if bad else 0
    if bad and st.below >= rule.patience:
        st.below = 0
        return "fire"
    return "bad" if bad else "hold"


def act(st: GuardState, mode: str, step: int, max_rollbacks: int) -> str:
    """What a firing does in ``mode``: "watch", "rollback" or "stop" (recorded in ``st``)."""
    if not st.fired:
        st.fired, st.fired_step = True, step
    if mode == "watch":
        return "watch"
    if mode == "rollback" and st.rollbacks < max_rollbacks:
        st.rollbacks += 1
        return "rollback"
    st.stopped = True
    return "stop"


def cut_lr(scale: float, factor: float, floor: float) -> float:
    """The cumulative learning-rate scale after one more rollback: ``scale * factor``, never
    below ``floor`` (0: no floor, each rollback cuts again)."""
    return max(scale * factor, floor) if floor > 0 else scale * factor


def flip_rate(before: list, now: list) -> float | None:
    """Share of probe items whose greedy answer changed since the previous check (None at the first)."""
    if not before or len(before) != len(now):
        return None
    return sum(1 for x, y in zip(before, now) if x != y) / len(now)


def slope(ys: list[float]) -> float | None:
    """Least-squares slope per step of equally spaced values (None with fewer than 2)."""
    n = len(ys)
    if n < 2:
        return None
    mx, my = (n - 1) / 2, sum(ys) / n
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / sum((i - mx) ** 2 for i in range(n))
