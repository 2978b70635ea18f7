"""Choosing a guard setting on the real collapse (issue 61, part 2), by simulation.

The collapse run (``items/collapse/``, Qwen2.5-Coder-0.5B, the vote on the 200 arithmetic seeds)
missed by the default guard (64 probe items, margin 0.10, spent rule at alpha 0.05 over its 9
planned checks, patience 2). Twelve candidate settings are put to the same two tests:

    probe items in {64, 128, 200, 256}  x  margin in {0.10, 0.05, 0}

(the rule itself stays: spent, alpha 0.05, patience 2; margin 0 lets the McNemar test alone
decide). Added in a later session, after a second collapse (README): patience 1 for every
setting, and probes of 384 and 512 items, 36 settings in all; the first twelve keep their
random streams, so their rows do not change. Every decision is made by serl's own rule code (``serl.run.guard_rule.judge``), and the
model of the probe is simulate.py's (its ``beta_params``, ``simulate`` and ``wilson``):

* **The collapse, replayed.** A probe of the candidate's size follows the collapse run's measured
  per-check agreement (steps 0, 2, ..., 12: the share of its 64 probe items agreeing with the
  anchor). At each check t the items' agreement probabilities follow simulate.py's Beta law with
  that check's mean a_t and the flip spread delta (2 E[p (1 - p)] = delta), and an item keeps its
  rank from check to check (its p at every check is the same quantile u_i of that check's law);
  each check draws the items independently given their p. delta is fitted so that the model's
  expected share of items whose agreement differs between two checks, averaged over all 21 pairs
  of the 7 checks, equals the run's (``collapse_model``). The schedule is the run's: 9 planned
  checks (16 steps, every 2), of which the first 7 (to step 12) happened.
* **Runs that do not get worse.** simulate.py's stationary model at the collapse's step-0
  agreement, with delta at the collapse's fitted rate and at the deciding run's measured mean
  and highest rates (0.123, 0.203), for schedules of 9 and 50 checks. The mean matters little:
  the score's variance between checks is delta / (2 n) whatever the mean.

PASS LINE (fixed here before this script's first run; the lead's brief had already reported an
earlier attempt's figures, below in the README):
  1. false alarms (the share of runs that do not get worse in which the guard fires at least
     once) <= 5 % in EVERY one of the six false-alarm cells (3 flip rates x 9 and 50 checks);
  2. the collapse caught: fired at or before step 10 in >= 80 % of the simulated replays.
Both on the point estimate; the 95 % Wilson intervals are reported beside it, and a candidate
whose interval straddles a line is marked "narrow". 2000 runs per cell, seeded per cell.

Added after the first run had shown that no candidate passes (so not part of the verdict): the
collapse replayed with delta fitted to consecutive checks only (0.081, less noise than the
all-pairs 0.124), to show how far the answer rests on the flip spread; and the fit to each check
against the best before it (the pairs the rule tests, as simulate.py measured the deciding run),
which gives the same delta as all pairs.

    python experiments/guard/candidates.py            # simulate (a minute or two), write candidates.json/.md and the README's table
    python experiments/guard/candidates.py --table    # rebuild the tables from candidates.json alone
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))
import simulate  # noqa: E402  (its model, its Wilson interval, its measured deciding run)

from serl.run.guard_rule import GuardState, Rule, judge  # noqa: E402

COLLAPSE = HERE / "items" / "collapse"
RESULTS = HERE / "candidates.json"
TABLE = HERE / "candidates.md"
README = HERE / "README.md"
BEGIN, END = "<!-- candidates.py table: begin -->", "<!-- candidates.py table: end -->"

SIZES = (64, 128, 200, 256, 384, 512)  # 384 and 512 added after the second collapse
MARGINS = (0.10, 0.05, 0.0)
ALPHA, PATIENCE = 0.05, 2
PATIENCES = (2, 1)  # patience 1 added after the second collapse (README): one bad check fires
RUN_CHECKS = 9  # the collapse run's planned checks: step 0, every 2 steps, to step 16
FA_CHECKS = (9, 50)
BY_STEP = 10  # the collapse must be caught at or before this step
FA_LINE, CAUGHT_LINE = 0.05, 0.80  # the pass line (docstring)
KEPT_WITHIN = 0.03  # report: the kept policy (the best check at firing) within 3 held-out points of the best
QN = 100_000  # draws per check's Beta law, sorted: its quantile table


# ---- the collapse run --------------------------------------------------------------------------
def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def collapse_data(run: Path = COLLAPSE) -> dict:
    """The run's checks (the last line per step), their agreement, held-out pass@1 and item flips."""
    checks = {int(r["step"]): r["items"] for r in _rows(run / "guard_items.jsonl")}
    steps = sorted(checks)
    held = {}
    for r in _rows(run / "metrics.jsonl"):
        if "eval/heldout/pass@1" in r:
            held[int(r["step"])] = r["eval/heldout/pass@1"]
    n = len(checks[steps[0]])
    pairs = [(s, t) for i, s in enumerate(steps) for t in steps[i + 1 :]]
    flips = {f"{s}-{t}": sum(x != y for x, y in zip(checks[s], checks[t])) for s, t in pairs}
    return {
        "source": str(run.relative_to(ROOT)),
        "probe_items": n,
        "steps": steps,
        "agreement": [sum(checks[s]) / n for s in steps],
        "heldout": [held.get(s) for s in steps],
        "flips": flips,
        "flip_all_pairs": sum(flips.values()) / (len(pairs) * n),
        "flip_consecutive": sum(flips[f"{s}-{t}"] for s, t in zip(steps, steps[1:])) / ((len(steps) - 1) * n),
    }


# ---- the model -----------------------------------------------------------------------------------
def quantile_table(mean: float, delta: float, qn: int = QN, seed: int = 0) -> np.ndarray:
    """simulate.py's Beta law (mean, 2 E[p (1 - p)] = delta) as a sorted sample: its quantiles."""
    a, b = simulate.beta_params(mean, delta)
    return np.sort(np.random.default_rng(seed).beta(a, b, qn))


def expected_flips(tables: list[np.ndarray], pairs: list[tuple[int, int]] | None = None) -> float:
    """The model's expected share of items whose agreement differs between two checks, averaged over
    ``pairs`` of checks (default: all pairs); an item keeps its quantile, so p_t(u) and p_s(u) pair by rank."""
    pairs = pairs or [(i, j) for i in range(len(tables)) for j in range(i + 1, len(tables))]
    out = [float(np.mean(tables[i] * (1 - tables[j]) + tables[j] * (1 - tables[i]))) for i, j in pairs]
    return sum(out) / len(out)


def fit_delta(means: list[float], target: float, qn: int = QN, pairs: list[tuple[int, int]] | None = None) -> float:
    """The flip spread delta at which the model's flip share over ``pairs`` equals ``target`` (bisection)."""
    lo, hi = 1e-4, min(2 * m * (1 - m) for m in means) * 0.999  # beyond hi a check's Beta law does not exist
    for _ in range(30):
        mid = (lo + hi) / 2
        if expected_flips([quantile_table(m, mid, qn) for m in means], pairs) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def collapse_model(data: dict | None = None, qn: int = QN) -> dict:
    data = data or collapse_data()
    delta = fit_delta(data["agreement"], data["flip_all_pairs"], qn)
    # A check: fitted instead to each check against the best before it (the pairs the rule tests,
    # as simulate.py measured the deciding run), delta comes out the same.
    agr, best, vs_best = data["agreement"], 0, []
    for t in range(1, len(agr)):
        vs_best.append((best, t))
        best = t if agr[t] > agr[best] else best
    n, steps = data["probe_items"], data["steps"]
    obs = sum(data["flips"][f"{steps[i]}-{steps[j]}"] for i, j in vs_best) / (len(vs_best) * n)
    # Sensitivity only (not in the verdict): fitted to consecutive checks alone, which flip less.
    cons = [(i, i + 1) for i in range(len(steps) - 1)]
    return {
        **data,
        "delta": delta,
        "flip_vs_best": obs,
        "delta_vs_best": fit_delta(agr, obs, qn, vs_best),
        "delta_consecutive": fit_delta(agr, data["flip_consecutive"], qn, cons),
        "qn": qn,
    }


def first_fire_kept(outcomes: np.ndarray, rule: Rule) -> tuple[int, int]:
    """The check at which ``rule`` first fires (-1: never) and the best check it would keep."""
    st = GuardState()
    for t, x in enumerate(outcomes):
        items = x.tolist()
        if judge(st, rule, t, sum(items) / len(items), items) == "fire":
            return t, st.best_step
    return -1, -1


def replay_collapse(
    rng, model: dict, items: int, rule: Rule, runs: int, delta: float | None = None
) -> list[tuple[int, int]]:
    """``runs`` probes of ``items`` items following the collapse's agreement path (flip spread
    ``delta``, default the fitted one): per run, the first firing check (-1: none) and the kept check."""
    qn = model["qn"]
    delta = model["delta"] if delta is None else delta
    tables = np.stack([quantile_table(m, delta, qn) for m in model["agreement"]])  # (checks, qn)
    out = []
    for _ in range(runs):
        u = rng.integers(0, qn, items)  # each item's quantile, kept across the checks
        p = tables[:, u]  # (checks, items)
        out.append(first_fire_kept(rng.random(p.shape) < p, rule))
    return out


def cell_rng(seed: int, *key) -> np.random.Generator:
    """One generator per cell, so that a cell's numbers do not depend on which others ran."""
    return np.random.default_rng([seed, *[int(round(k * 1000)) for k in key]])


def rate(k: int, n: int) -> dict:
    return {"fired": k, "runs": n, "rate": k / n, "ci": list(simulate.wilson(k, n))}


def evaluate(
    items: int, margin: float, model: dict, deltas: list[tuple[str, float]], runs: int, seed: int, patience: int = PATIENCE
) -> dict:
    """One candidate: its false alarms in each cell and its replays of the collapse."""
    extra = () if patience == PATIENCE else (patience,)  # patience 2's cells keep their first streams
    fa = []
    for label, delta in deltas:
        for checks in FA_CHECKS:
            rule = Rule(margin=margin, patience=patience, alpha=ALPHA, rule="spent", checks=checks)
            rng = cell_rng(seed, 1, items, margin, delta, checks, *extra)
            fires = simulate.simulate(rng, checks, rule, runs, model["agreement"][0], delta, items=items)
            fa.append({"delta": delta, "delta_from": label, "checks": checks, **rate(sum(f >= 0 for f in fires), runs)})
    rule = Rule(margin=margin, patience=patience, alpha=ALPHA, rule="spent", checks=RUN_CHECKS)
    res = replay_collapse(cell_rng(seed, 2, items, margin, *extra), model, items, rule, runs)
    steps, held = model["steps"], model["heldout"]
    fired = [(steps[f], steps[k]) for f, k in res if f >= 0]
    best = max(h for h in held if h is not None)
    by = int(np.searchsorted(steps, BY_STEP, side="right"))  # checks at or before BY_STEP
    caught = sum(f < by for f, _ in res if f >= 0)
    kept_ok = sum(
        held[steps.index(k)] is not None and held[steps.index(k)] >= best - KEPT_WITHIN - 1e-9 for _, k in fired
    )
    worst = max(fa, key=lambda r: r["rate"])
    out = {
        "items": items,
        "margin": margin,
        "alpha": ALPHA,
        "patience": patience,
        "rule": "spent",
        "false_alarm": fa,
        "worst_false_alarm": worst,
        "collapse": {
            "planned_checks": RUN_CHECKS,
            "caught_by_step": BY_STEP,
            "caught": rate(caught, runs),
            "fired_by_end": rate(len(fired), runs),
            "end_step": steps[-1],
            "fired_at": {str(s): sum(f == s for f, _ in fired) for s in steps},
            "median_step": float(np.median([f for f, _ in fired])) if fired else None,
            "kept_at": {str(s): sum(k == s for _, k in fired) for s in steps},
            "kept_within_3": kept_ok / len(fired) if fired else None,
        },
    }
    sens = replay_collapse(cell_rng(seed, 3, items, margin, *extra), model, items, rule, runs, model["delta_consecutive"])
    out["collapse"]["sensitivity"] = {
        "delta": model["delta_consecutive"],
        "delta_from": "consecutive checks (not in the verdict)",
        "caught": rate(sum(0 <= f < by for f, _ in sens), runs),
    }
    out["pass_false_alarm"] = all(r["rate"] <= FA_LINE for r in fa)
    out["pass_caught"] = out["collapse"]["caught"]["rate"] >= CAUGHT_LINE
    out["pass"] = out["pass_false_alarm"] and out["pass_caught"]
    lo_fa, hi_fa = worst["ci"]
    lo_c, hi_c = out["collapse"]["caught"]["ci"]
    out["narrow"] = lo_fa <= FA_LINE < hi_fa or lo_c < CAUGHT_LINE <= hi_c
    return out


def run_all(runs: int, seed: int, qn: int = QN) -> dict:
    t0 = time.time()
    model = collapse_model(qn=qn)
    m = simulate.measured()
    deltas = [
        ("collapse, fitted", model["delta"]),
        ("deciding run, mean", m["delta_mean"]),
        ("deciding run, max", m["delta_max"]),
    ]
    res = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "seed": seed,
        "runs": runs,
        "pass_line": {
            "false_alarm_at_most": FA_LINE,
            "false_alarm_cells": [f"{d[0]} x {c} checks" for d in deltas for c in FA_CHECKS],
            "caught_by_step": BY_STEP,
            "caught_at_least": CAUGHT_LINE,
            "on": "point estimates; 'narrow' when a 95% Wilson interval straddles a line",
        },
        "model": {k: v for k, v in model.items()},
        "deltas": [{"from": a, "delta": b} for a, b in deltas],
        "no_worse_agreement": model["agreement"][0],
        "candidates": [],
    }
    grid = [(p, i, m) for p in PATIENCES for i in SIZES for m in MARGINS]
    for patience, items, margin in grid:
        c = evaluate(items, margin, model, deltas, runs, seed, patience)
        res["candidates"].append(c)
        print(
            f"patience {patience}, {items:3d} items margin {margin:.2f}: worst false alarm "
            f"{100 * c['worst_false_alarm']['rate']:.1f} %, caught by step {BY_STEP} "
            f"{100 * c['collapse']['caught']['rate']:.1f} % -> {'PASS' if c['pass'] else 'fail'}",
            flush=True,
        )
    res["seconds"] = round(time.time() - t0, 1)
    return res


# ---- the tables ----------------------------------------------------------------------------------
def pct(r: dict) -> str:
    lo, hi = r["ci"]
    return f"{100 * r['rate']:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]"


def summary(res: dict) -> str:
    mo = res["model"]
    path = ", ".join(f"{a:.3f}" for a in mo["agreement"])
    lines = [
        f"Simulated {res['date']} on {res['machine']}, {res['runs']} runs per cell, seed {res['seed']} "
        f"({res['seconds']} s). Rule: spent, alpha {ALPHA} over the planned checks, patience 2 and 1. "
        f"The collapse replayed: agreement {path} at steps {', '.join(map(str, mo['steps']))} "
        f"(its 9 planned checks; flip spread delta {mo['delta']:.3f}, fitted to the {100 * mo['flip_all_pairs']:.1f} % "
        f"of items that differ between two of its checks, all pairs; fitted to each check against the best before it: "
        f"{mo['delta_vs_best']:.3f}). Runs that do not get worse: agreement "
        f"{res['no_worse_agreement']:.3f}, delta "
        + ", ".join(f"{d['delta']:.3f} ({d['from']})" for d in res["deltas"])
        + f", 9 and 50 checks. Pass: false alarms <= {100 * FA_LINE:.0f} % in all six cells and the collapse "
        f"caught by step {BY_STEP} in >= {100 * CAUGHT_LINE:.0f} % (point estimates, 95% Wilson intervals). "
        f"'kept within 3 points': among runs that fired by step {mo['steps'][-1]}, the share whose kept check "
        f"(the best at firing) is within 3 points of the run's best held-out pass@1. The last column, added after "
        f"the first run, is not part of the verdict: delta fitted to consecutive checks only.",
        "",
        f"| patience | probe items | margin | worst false alarm (cell) | caught by step {BY_STEP} | fired by step "
        f"{mo['steps'][-1]} | median firing step | kept within 3 points | verdict | caught by step {BY_STEP} at delta "
        f"{mo['delta_consecutive']:.3f} (sensitivity) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in res["candidates"]:
        w, co = c["worst_false_alarm"], c["collapse"]
        med = "-" if co["median_step"] is None else f"{co['median_step']:g}"
        kept = "-" if co["kept_within_3"] is None else f"{100 * co['kept_within_3']:.0f} %"
        verdict = ("**pass**" if c["pass"] else "fail") + (" (narrow)" if c["narrow"] else "")
        lines.append(
            f"| {c.get('patience', PATIENCE)} | {c['items']} | {c['margin']:g} | {pct(w)} ({w['delta']:.3f}, {w['checks']} checks) | "
            f"{pct(co['caught'])} | {pct(co['fired_by_end'])} | {med} | {kept} | {verdict} | "
            f"{pct(co['sensitivity']['caught'])} |"
        )
    return "\n".join(lines)


def full(res: dict) -> str:
    cells = [(r["delta"], r["delta_from"], r["checks"]) for r in res["candidates"][0]["false_alarm"]]
    head = " | ".join(f"delta {d:.3f}, {c} checks" for d, _, c in cells)
    lines = [
        "**False alarms per run, every cell** (runs that do not get worse; 95% Wilson intervals):",
        "",
        f"| patience | probe items | margin | {head} |",
        "|---|---|---|" + "---|" * len(cells),
    ]
    for c in res["candidates"]:
        lines.append(f"| {c.get('patience', PATIENCE)} | {c['items']} | {c['margin']:g} | " + " | ".join(pct(r) for r in c["false_alarm"]) + " |")
    steps = res["model"]["steps"]
    lines += [
        "",
        "**The collapse's replays: where the guard first fired** (share of runs, by step) and the kept check:",
        "",
        "| patience | probe items | margin | " + " | ".join(f"fired at {s}" for s in steps) + " | kept (step: runs) |",
        "|---|---|---|" + "---|" * (len(steps) + 1),
    ]
    for c in res["candidates"]:
        co, n = c["collapse"], c["collapse"]["caught"]["runs"]
        kept = ", ".join(f"{s}: {k}" for s, k in co["kept_at"].items() if k)
        lines.append(
            f"| {c.get('patience', PATIENCE)} | {c['items']} | {c['margin']:g} | "
            + " | ".join(f"{100 * co['fired_at'][str(s)] / n:.1f} %" for s in steps)
            + f" | {kept or '-'} |"
        )
    return "\n".join(lines)


def write_tables(res: dict) -> str:
    text = summary(res)
    TABLE.write_text(
        "# Choosing a guard setting on the collapse (generated by `candidates.py` from candidates.json)\n\n"
        + text
        + "\n\n"
        + full(res)
        + "\n"
    )
    readme = README.read_text()
    if BEGIN in readme and END in readme:
        a, b = readme.index(BEGIN) + len(BEGIN), readme.index(END)
        README.write_text(readme[:a] + "\n" + text + "\n" + readme[b:])
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", action="store_true", help="rebuild the tables from candidates.json only")
    ap.add_argument("--runs", type=int, default=2000, help="simulated runs per cell")
    ap.add_argument("--seed", type=int, default=61)
    args = ap.parse_args(argv)
    if args.table:
        res = json.loads(RESULTS.read_text())
    else:
        res = run_all(args.runs, args.seed)
        RESULTS.write_text(json.dumps(res, indent=1) + "\n")
    print(write_tables(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
