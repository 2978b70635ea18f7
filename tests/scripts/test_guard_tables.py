"""The guard's experiment tables (experiments/guard, issue 61) from their kept files: real_runs.md
rebuilds with the standard library alone, candidates.json obeys its own pass line, and the
McNemar numbers behind them are worked by hand. Nothing here re-runs the 2000-run simulation."""

import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUARD = ROOT / "experiments" / "guard"
ITEMS = GUARD / "items"

# what the rebuild may not import: torch above all, and nothing beyond the standard library
BLOCKED = ("torch", "numpy", "scipy", "yaml", "matplotlib", "transformers", "vllm")


@pytest.fixture()
def guard_module():
    """``guard_module(name)`` imports a script of experiments/guard (its folder on sys.path for the
    test only, as when the scripts run)."""
    sys.path.insert(0, str(GUARD))
    try:
        yield importlib.import_module
    finally:
        sys.path.remove(str(GUARD))


def rebuild(items: Path, dest: Path) -> str:
    """real_table.write_table in a fresh interpreter in which importing torch (or numpy, ...) fails."""
    code = (
        "import sys\n"
        f"for m in {BLOCKED!r}: sys.modules[m] = None  # import m -> ImportError\n"
        f"sys.path.insert(0, {str(GUARD)!r})\n"
        "from pathlib import Path\n"
        "import real_table\n"
        f"real_table.write_table(Path({str(items)!r}), Path({str(dest)!r}))\n"
        "assert 'torch' not in sys.modules or sys.modules['torch'] is None\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return dest.read_text()


def test_real_runs_table_rebuilds_without_torch_and_states_the_collapse(tmp_path):
    text = rebuild(ITEMS, tmp_path / "real_runs.md")
    # held-out pass@1 72.5 -> 91.0 at step 2 -> 75.0 at step 12, and the rules replayed on its probe
    assert "Held-out pass@1: start 0.725, best 0.910 (step 2), end 0.750" in text
    assert "| 12 | 0.750 | 0.00 | 0.81 | 0.750 | 0.750 | 0.891 (2) | 0.0112 |" in text
    assert "| anchor agreement, no margin (margin 0, spent, patience 2) | never |  |  |" in text
    assert "| anchor agreement, the old rule (per check, patience 1) | 12 | -6 | 0.750 vs 0.910 |" in text
    assert "End (step 12) against the best (step 2): -16.0 [-22.1, -10.2]" in text
    # the committed table is the one the kept files give (rebuild it after adding a run to items/)
    assert (GUARD / "real_runs.md").read_text() == text


def test_real_runs_table_covers_every_run_folder(tmp_path):
    items = tmp_path / "items"
    items.mkdir()
    shutil.copytree(ITEMS / "collapse", items / "collapse")
    # a 256-item-probe run as real_runs.py exports it (the command's flags), and a resumed one
    shutil.copytree(ITEMS / "collapse", items / "collapse_p256_s7")
    flags = ["--guard_probe", "256", "--guard_margin", "0", "--seed", "7", "--steps", "16", "--guard_every", "2"]
    (items / "collapse_p256_s7" / "flags.json").write_text(json.dumps(flags))
    shutil.copytree(ITEMS / "collapse", items / "improving_p256")
    (items / "improving_p256" / "flags.json").write_text(json.dumps(["--resume", "runs/guard/improving_p256"]))
    (items / "anchors").mkdir()  # real_runs.py's kept anchors: not a run
    text = rebuild(items, tmp_path / "real_runs.md")
    sections = [line for line in text.splitlines() if line.startswith("### ")]
    assert sections == ["### collapse", "### collapse_p256_s7", "### improving_p256"]
    p256 = text.split("### collapse_p256_s7")[1].split("### improving_p256")[0]
    assert "the run's guard: margin 0, spent at alpha 0.05 over 9 planned checks, patience 2; seed 7" in p256
    # the logged probe has 64 items whatever the flags say, and no margin-0 replay fires on it
    assert "Probe 64 items" in p256 and "| anchor agreement, the run's own guard (logged) | never |" in p256
    # a resumed run's flags say nothing: its name says --probe 256, hence margin 0
    assert "the run's guard: margin 0, spent" in text.split("### improving_p256")[1]


def test_candidates_json_obeys_its_pass_line(guard_module):
    cand = guard_module("candidates")
    res = json.loads((GUARD / "candidates.json").read_text())
    line = res["pass_line"]
    assert (line["false_alarm_at_most"], line["caught_at_least"], line["caught_by_step"]) == (0.05, 0.80, 10)
    assert len(line["false_alarm_cells"]) == 6
    # the replayed path is the collapse run's measured agreement, step 0 to 12
    model = res["model"]
    assert model["steps"] == [0, 2, 4, 6, 8, 10, 12]
    assert [round(a, 3) for a in model["agreement"]] == [0.688, 0.891, 0.828, 0.844, 0.828, 0.828, 0.75]
    assert model["agreement"] == cand.collapse_data()["agreement"]
    got = {(c["patience"], c["items"], c["margin"]) for c in res["candidates"]}
    sizes = (64, 128, 200, 256, 384, 512)
    assert got == {(p, n, m) for p in (2, 1) for n in sizes for m in (0.10, 0.05, 0.0)}
    for c in res["candidates"]:
        cells = [*c["false_alarm"], c["collapse"]["caught"], c["collapse"]["fired_by_end"]]
        assert len(c["false_alarm"]) == 6 and all(r["runs"] == res["runs"] for r in cells)
        for r in cells:
            assert r["rate"] == r["fired"] / r["runs"]
            assert r["ci"] == pytest.approx(list(cand.simulate.wilson(r["fired"], r["runs"])))
        fa_ok = all(r["rate"] <= 0.05 for r in c["false_alarm"])
        assert c["pass"] == (fa_ok and c["collapse"]["caught"]["rate"] >= 0.80)
    # by hand: 256 items, margin 0. Its worst false alarm is 44 of 2000 runs (2.2 % <= 5 %), but it
    # caught the collapse by step 10 in 840 of 2000 replays (42 % < 80 %): it fails.
    pick = {(c["patience"], c["items"], c["margin"]): c for c in res["candidates"]}
    c = pick[2, 256, 0.0]
    assert max(r["fired"] for r in c["false_alarm"]) == 44 and c["pass_false_alarm"]
    assert c["collapse"]["caught"]["fired"] == 840 and not c["pass_caught"] and not c["pass"]
    # 512 items, margin 0, patience 2: 57 of 2000 (2.85 %) and 1714 of 2000 (85.7 %): it passes
    c = pick[2, 512, 0.0]
    assert max(r["fired"] for r in c["false_alarm"]) == 57 and c["collapse"]["caught"]["fired"] == 1714 and c["pass"]
    # patience 1 at 256 items catches 1498 (74.9 %) but fires in 579 of 2000 runs that do not get worse
    c = pick[1, 256, 0.0]
    assert max(r["fired"] for r in c["false_alarm"]) == 579 and not c["pass_false_alarm"]
    assert [c["items"] for c in res["candidates"] if c["pass"]] == [512]
    # the committed tables are the json's
    summary = cand.summary(res)
    assert summary in (GUARD / "candidates.md").read_text() and summary in (GUARD / "README.md").read_text()


def test_candidates_simulation_runs_small_and_seeded(guard_module):
    cand = guard_module("candidates")
    model = cand.collapse_model(qn=2000)
    assert 0.05 < model["delta"] < 0.2
    args = (64, 0.0, model, [("test", 0.12)], 8, 3)
    a, b = cand.evaluate(*args), cand.evaluate(*args)
    assert a == b  # seeded per cell
    assert [r["checks"] for r in a["false_alarm"]] == [9, 50]
    assert 0 <= a["collapse"]["caught"]["fired"] <= a["collapse"]["fired_by_end"]["fired"] <= 8
    assert sum(a["collapse"]["fired_at"].values()) == a["collapse"]["fired_by_end"]["fired"]


def test_mcnemar_worked_by_hand():
    from serl.run.guard_rule import Rule, binom_tail, lost_gained

    assert binom_tail(13, 0) == 2**-13  # 13 items lost, none gained: all 13 coins the same way
    assert binom_tail(0, 5) == 1.0 and binom_tail(0, 0) == 1.0
    # the collapse's step 12 against its best (step 2): 11 items lost, 2 gained, of 64
    checks = {}
    for line in (ITEMS / "collapse" / "guard_items.jsonl").read_text().splitlines():
        r = json.loads(line)
        checks[r["step"]] = r["items"]
    assert lost_gained(checks[2], checks[12]) == (11, 2)
    p = binom_tail(11, 2)  # P(X >= 11), X ~ Bin(13, 1/2) = (C(13,11) + C(13,12) + C(13,13)) / 2^13
    assert p == (78 + 13 + 1) / 2**13
    logged = [json.loads(x) for x in (ITEMS / "collapse" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert p == pytest.approx(next(r["guard/drop_p"] for r in logged if r["step"] == 12 and "guard/drop_p" in r))
    # 0.0112 is above the spent level 0.05 / 9 = 0.0056: not a bad check, even with margin 0
    assert p > Rule(margin=0.0, checks=9).level() == pytest.approx(0.05 / 9)


@pytest.mark.parametrize(
    ("setting", "tag", "flags"),
    [
        ({}, "collapse_p512", []),
        ({"seed": 7, "every": 1}, "collapse_p512_s7_e1", ["--steps", "16", "--collapse_guard", "watch"]),
        (
            {"mode": "rollback", "lr_scale": 1.0, "steps": 24},
            "collapse_p512_rollback_lr1_n24",
            ["--steps", "24", "--collapse_guard", "rollback", "--guard_every", "2", "--eval_steps", "2"],
        ),
        ({"mode": "rollback", "lr_floor": 0.5}, "collapse_p512_rollback_floor0.5", ["--guard_lr_floor", "0.5"]),
    ],
)
def test_real_runs_names_each_setting_and_its_flags_win(guard_module, tmp_path, setting, tag, flags):
    """Each setting beyond the first runs' is in the run's name, and its flags come after the round's
    (argparse and real_table.settings both keep the last of a repeated flag)."""
    real_runs, real_table = guard_module("real_runs"), guard_module("real_table")
    s = real_runs.Setting(probe=512, **setting)
    assert real_runs.name("collapse", s) == tag
    extra = real_runs.setting_flags(s)
    assert " ".join(flags) in " ".join(extra)
    assert (extra == []) == (setting == {})
    # real_table reads a run's exported command as serl's parser does: the last of a repeated flag
    run = tmp_path / tag
    run.mkdir()
    (run / "flags.json").write_text(json.dumps(["--steps", "16", "--guard_every", "2", "--seed", str(s.seed), *extra]))
    kept = real_table.settings(tag, run)
    assert (kept["steps"], kept["guard_every"], kept["seed"]) == (s.steps, s.every, s.seed)
    assert kept["guard_margin"] == 0.0  # the name's _p512: real_runs.py's margin 0
