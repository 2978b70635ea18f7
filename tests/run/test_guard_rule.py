"""The collapse guard's rule since issue 61 (serl.run.guard_rule): the false-alarm budget spent
over the run's checks, patience, the rollback's LR floor, and the candidate signals logged at
each check. Hand-worked numbers; the deciding run's 16 checks replayed under both rules."""

import json
from types import SimpleNamespace

import pytest

from serl import ConfigError
from serl.run.guard import ITEMS_FILE, CollapseGuard
from serl.run.guard_rule import (
    GuardState,
    Rule,
    binom_tail,
    cut_lr,
    flip_rate,
    judge,
    lost_gained,
    planned_checks,
    slope,
)


class FakeLearner:
    def __init__(self):
        self.lr_scale = 1.0

    def save(self, path, state=True):
        from pathlib import Path

        Path(path).mkdir(parents=True)

    def load_policy(self, path):
        pass

    def named_weights(self):
        return iter(())


class FakeLogger:
    def __init__(self):
        self.rows = []

    def log(self, step, m):
        self.rows.append((step, dict(m)))


@pytest.mark.parametrize("steps,every,want", [(200, 4, 51), (52, 4, 14), (10, 4, 4), (3, 1, 4), (1, 2, 2)])
def test_planned_checks(steps, every, want):
    # step 0, every `every` steps, and the last step when it is not on the grid
    assert planned_checks(steps, every) == want


def test_levels():
    assert Rule(alpha=0.05, rule="per_check", checks=51).level() == 0.05
    assert Rule(alpha=0.05, rule="spent", checks=51).level() == pytest.approx(0.05 / 51)
    assert Rule(alpha=0.05, rule="spent", checks=0).level() == 0.05  # nothing planned: one check
    assert Rule(alpha=1.0, rule="spent", checks=51).level() == 1.0  # --guard_alpha 1: no test


def items(agree: int, lost: int, gained: int, n: int = 64) -> tuple[list[int], list[int]]:
    """A best check with ``agree`` of ``n`` items and a later one that lost ``lost`` of them and
    gained ``gained`` others."""
    best = [1] * agree + [0] * (n - agree)
    now = list(best)
    for i in range(lost):
        now[i] = 0
    for i in range(gained):
        now[agree + i] = 1
    return best, now


# The deciding run's arm a (experiments/serl_efficacy, issue 49): each check's agreement count
# of 64 and, against the best before it, items lost (b) and gained (c), recovered from its
# metrics (guard/agreement, guard/drop_p: the one (b, c) with b - c the count's fall and that p).
DECIDE = [
    (0, 27, 0, 0),
    (4, 28, 3, 4),
    (8, 25, 6, 3),
    (12, 26, 6, 4),
    (16, 21, 10, 3),
    (20, 28, 3, 3),
    (24, 29, 3, 4),
    (25, 26, 4, 1),
    (28, 25, 6, 2),
    (32, 22, 7, 0),
    (36, 25, 5, 1),
    (40, 26, 5, 2),
    (44, 25, 5, 1),
    (48, 25, 6, 2),
    (50, 24, 6, 1),
    (52, 21, 10, 2),
]


def test_decide_pairs_match_the_logged_p():
    rows = {}
    for line in open("experiments/serl_efficacy/items/decide/arm_a/metrics.jsonl"):
        r = json.loads(line)
        if "guard/agreement" in r:
            rows[r["step"]] = r
    for step, count, b, c in DECIDE:
        assert round(rows[step]["guard/agreement"] * 64) == count
        assert binom_tail(b, c) == pytest.approx(rows[step]["guard/drop_p"], abs=1e-3)


def replay(rule: Rule) -> list[int]:
    """Steps at which ``rule`` fires on the deciding run's checks (the best as the run had it:
    the fired rollbacks reloaded the best, so later checks are still against it)."""
    st, fired = GuardState(), []
    for step, count, b, c in DECIDE:
        if st.best is None:
            judge(st, rule, step, count / 64, [1] * count + [0] * (64 - count))
            continue
        before = st.best_items
        agree = sum(before)
        now = list(before)
        lost = [i for i, x in enumerate(before) if x][:b]
        won = [i for i, x in enumerate(before) if not x][:c]
        for i in lost:
            now[i] = 0
        for i in won:
            now[i] = 1
        assert sum(now) == count and agree - b + c == count
        if judge(st, rule, step, count / 64, now) == "fire":
            fired.append(step)
    return fired


def test_the_deciding_run_replayed():
    # the old rule fires where the run did: steps 16, 32 and 52 (p = 0.046, 0.008, 0.019)
    assert replay(Rule(patience=1, rule="per_check")) == [16, 32, 52]
    # the new rule, over the 51 checks of its planned 200 steps, never does: no check reaches
    # p < 0.05/51, and no two bad checks come in a row
    assert replay(Rule(rule="spent", checks=planned_checks(200, 4))) == []
    # even spread over only the 16 checks it made, with patience 1: the lowest p was 2^-7 = 0.0078
    # (step 32), above 0.05/16 = 0.0031
    assert replay(Rule(patience=1, rule="spent", checks=16)) == []


def test_spent_rule_by_hand():
    rule = Rule(margin=0.10, patience=2, alpha=0.05, rule="spent", checks=51)  # level 0.00098
    best, now = items(29, 10, 2)  # 29 -> 21, p = 0.0193: fires under the old rule
    assert lost_gained(best, now) == (10, 2)
    st = GuardState()
    judge(st, rule, 0, 29 / 64, best)
    assert judge(st, rule, 4, 21 / 64, now) == "hold"
    _, deep = items(29, 12, 0)  # 29 -> 17, p = 2^-12 = 0.000244 < 0.00098
    assert binom_tail(12, 0) == pytest.approx(2**-12)
    assert judge(st, rule, 8, 17 / 64, deep) == "bad"
    assert judge(st, rule, 12, 17 / 64, deep) == "fire"  # the second bad check in a row
    assert st.below == 0


def test_margin_zero_lets_the_test_alone_decide():
    # 256 items, level 0.05/9 = 0.00556. A 5-point fall (13 lost, 0 gained): p = 2^-13 = 0.000122.
    rule0 = Rule(margin=0.0, patience=2, alpha=0.05, rule="spent", checks=9)
    rule10 = Rule(margin=0.10, patience=2, alpha=0.05, rule="spent", checks=9)
    best, now = items(200, 13, 0, n=256)
    assert binom_tail(13, 0) == pytest.approx(2**-13)
    for rule, want in ((rule0, "bad"), (rule10, "hold")):  # 0.051 below the best: inside a 0.10 margin
        st = GuardState()
        judge(st, rule, 0, 200 / 256, best)
        assert judge(st, rule, 2, 187 / 256, now) == want
    # a fall the test does not trust (7 lost, 3 gained: p = 0.17) is no bad check even at margin 0
    st = GuardState()
    judge(st, rule0, 0, 200 / 256, best)
    _, small = items(200, 7, 3, n=256)
    assert judge(st, rule0, 2, 196 / 256, small) == "hold"


@pytest.mark.parametrize(
    "factor,floor,want",
    [
        (0.5, 0.0, [0.5, 0.25, 0.125]),  # as before: each rollback halves it for good
        (0.5, 0.3, [0.5, 0.3, 0.3]),  # a floor bounds the cumulative cut
        (1.0, 0.0, [1.0, 1.0, 1.0]),  # no cut at all
    ],
)
def test_lr_cut(factor, floor, want):
    scale, got = 1.0, []
    for _ in range(3):
        scale = cut_lr(scale, factor, floor)
        got.append(scale)
    assert got == pytest.approx(want)


def test_flip_rate_and_slope():
    assert flip_rate([], ["1", "2"]) is None
    assert flip_rate(["1", "2", None, "4"], ["1", "3", None, "5"]) == 0.5
    assert slope([0.5]) is None
    assert slope([0.2, 0.4, 0.6]) == pytest.approx(0.2)
    assert slope([0.5, 0.7, 0.5, 0.7]) == pytest.approx(0.04)  # x centred at 1.5: (-.5*-1.5... )/5


# ---- the guard: signals, items file, floor, resume ------------------------------------------------
def guard(tmp_path, scores, **opts):
    cfg = SimpleNamespace(
        **{
            **dict(
                collapse_guard="rollback",
                guard_margin=0.10,
                guard_patience=1,
                guard_alpha=0.05,
                guard_every=2,
                guard_lr_scale=0.5,
                guard_max_rollbacks=3,
                guard_labels=False,
                guard_anchor="",
                guard_rule="spent",
                guard_checks=0,
                guard_lr_floor=0.0,
                steps=8,
            ),
            **opts,
        }
    )
    engines = SimpleNamespace(
        generator=SimpleNamespace(load_weights=lambda w: None), learner=FakeLearner(), checker=None
    )
    g = CollapseGuard(cfg, None, engines, tmp_path, "m", FakeLogger(), ([], {}))
    it = iter(scores)

    def score():
        k, answers = next(it)
        its = [1] * k + [0] * (10 - k)
        return k / 10, its, {"_answers": answers, "_idx": list(range(10))}

    g.score = score
    return g


def test_signals_at_each_check_and_the_items_file(tmp_path):
    a0 = [str(i) for i in range(10)]
    a2 = ["x", "y"] + a0[2:]  # two answers changed since step 0
    g = guard(tmp_path, [(10, a0), (10, a2)])
    assert g.rule.checks == 5 and g.rule.level() == pytest.approx(0.01)  # steps 0, 2, 4, 6, 8
    g.check(0, final=False)
    assert "guard/flip_rate" not in g.last_metrics and "guard/lost" not in g.last_metrics
    for step, (va, ent) in enumerate([(0.5, 0.3), (0.7, 0.2)], start=1):
        g.signals({"reward/agreement": va, "actor/entropy": ent})
        g.check(step, final=False)
    m = g.last_metrics
    assert m["guard/flip_rate"] == 0.2
    assert m["guard/vote_agreement_mean"] == pytest.approx(0.6)
    assert m["guard/entropy_mean"] == pytest.approx(0.25)
    assert m["guard/vote_agreement_trend"] == pytest.approx(0.2)
    assert (m["guard/lost"], m["guard/gained"]) == (0, 0)
    assert m["guard/level"] == pytest.approx(0.01)
    rows = [json.loads(x) for x in (tmp_path / ITEMS_FILE).read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 2] and rows[1]["answers"] == a2 and rows[1]["items"] == [1] * 10


def test_rollbacks_respect_the_lr_floor(tmp_path):
    a = [str(i) for i in range(10)]
    # 10/10, then 0/10 three times: p = 2^-10 < 0.01 each; patience 1 (as set here)
    g = guard(tmp_path, [(10, a), (0, a), (0, a), (0, a)], guard_lr_floor=0.3)
    for step in (0, 2, 4, 6):
        g.check(step, final=False)
    assert g.st.rollbacks == 3 and g.st.lr_scale == pytest.approx(0.3) and g.learner.lr_scale == pytest.approx(0.3)


def test_a_resume_keeps_the_rule(tmp_path):
    a = [str(i) for i in range(10)]
    first = guard(tmp_path, [(5, a)])
    first.check(0, final=False)
    state = json.loads(json.dumps(first.state_dict()))
    guard(tmp_path, []).load_state_dict(state)  # the same rule: fine
    with pytest.raises(ConfigError, match="guard_rule"):
        guard(tmp_path, [], guard_rule="per_check").load_state_dict(state)
    with pytest.raises(ConfigError, match="guard_rule"):
        guard(tmp_path, [], guard_alpha=0.1).load_state_dict(state)
    # a resume with a larger --steps keeps the plan the run started with (5 checks), with a warning
    longer = guard(tmp_path, [], steps=20)
    longer.load_state_dict(state)
    assert longer.rule.checks == 5 and longer.st.rule["checks"] == 5
    with pytest.raises(ConfigError, match="guard_checks"):
        guard(tmp_path, [], guard_checks=9).load_state_dict(state)  # a plan given now that is not the run's
    old = {k: v for k, v in state.items() if k not in ("rule", "last_answers")}  # saved before issue 61
    with pytest.raises(ConfigError, match="per_check"):
        guard(tmp_path, []).load_state_dict(old)
    g = guard(tmp_path, [], guard_rule="per_check")
    g.load_state_dict(old)
    assert g.st.rule["rule"] == "per_check"


def test_options_parse_and_refuse():
    from serl.config.parser import parse_args

    cfg, _ = parse_args(
        ["--recipe", "serl", "--guard_rule", "per_check", "--guard_lr_floor", "0.25", "--guard_checks", "20"]
    )
    assert (cfg.guard_rule, cfg.guard_lr_floor, cfg.guard_checks, cfg.guard_patience) == ("per_check", 0.25, 20, 2)
    for argv, err in ((["--guard_checks", "-1"], "guard_checks"), (["--guard_lr_floor", "1.5"], "guard_lr_floor")):
        with pytest.raises(ConfigError, match=err):
            parse_args(["--recipe", "serl", "--collapse_guard", "watch", *argv])
