"""The collapse guard's false-alarm rate per run and its power, by simulation (issue 61, part 1a).

Numpy only, no torch: the decisions are made by serl's own rule code (``serl.run.guard_rule``,
pure Python), so what is simulated is what a run does.

The noise model comes from the one guarded run on record, the deciding run's arm a
(``experiments/serl_efficacy/items/decide/arm_a/metrics.jsonl``). Its per-item probe outcomes
were not kept (``guard_items.jsonl`` exists since this issue), but each check logged its
agreement count and the McNemar p against the best check, and those two give the items lost
(b) and gained (c) exactly (``recover_pairs``). Between two checks of that run, b + c averaged
about 8 of 64 items: the share of probe items whose agreement flips between checks, delta.

Model of a run whose policy does not get worse: item i agrees with the anchor at each check
with its own probability p_i, independently across checks; the p_i follow a Beta law whose
mean is the untrained policy's agreement (27/64) and whose spread makes two checks disagree
on a share delta of the items (2 E[p (1 - p)] = delta). A stationary policy is the hardest
case among those that do not get worse: a rising one gives fewer false alarms.

A collapse: from check ``start`` on, every p_i shrinks by the same factor, so that the mean
agreement falls by X points over K checks and stays there.

    python experiments/guard/simulate.py            # simulate, write results.json and the README's table
    python experiments/guard/simulate.py --table    # rebuild the table from results.json alone
"""
from __future__ import annotations

import argparse
import json
import math
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
from serl.run.guard_rule import GuardState, Rule, binom_tail, judge  # noqa: E402

METRICS = ROOT / "experiments/serl_efficacy/items/decide/arm_a/metrics.jsonl"
RESULTS = HERE / "results.json"
README = HERE / "README.md"
N_ITEMS = 64
BEGIN, END = "<!-- simulate.py table: begin -->", "<!-- simulate.py table: end -->"


# ---- what the deciding run measured ----------------------------------------------------------
def recover_pairs(path: Path = METRICS) -> list[dict]:
    """Each check of the run: its agreement count, and against the best before it the items
    lost (b) and gained (c): b - c is the count's fall, and the logged p picks the one b."""
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    checks = [r for r in rows if "guard/agreement" in r]
    out, best_step = [], None
    count = {r["step"]: round(r["guard/agreement"] * N_ITEMS) for r in checks}
    for r in checks:
        step = r["step"]
        if best_step is None:
            out.append({"step": step, "count": count[step]})
        else:
            fall = count[best_step] - count[step]
            b = next(b for b in range(max(fall, 0), N_ITEMS + 1)
                     if b - fall >= 0 and abs(binom_tail(b, b - fall) - r["guard/drop_p"]) < 1e-3)
            out.append({"step": step, "count": count[step], "against": best_step, "lost": b, "gained": b - fall})
        best_step = r["guard/best_step"]
    return out


def measured() -> dict:
    pairs = recover_pairs()
    flips = [(p["lost"] + p["gained"]) / N_ITEMS for p in pairs if "lost" in p]
    counts = [p["count"] for p in pairs]
    return {"source": str(METRICS.relative_to(ROOT)), "checks": pairs, "start_agreement": counts[0] / N_ITEMS,
            "mean_agreement": float(np.mean(counts)) / N_ITEMS, "sd_count": float(np.std(counts, ddof=1)),
            "delta_mean": float(np.mean(flips)), "delta_max": float(np.max(flips)), "delta_min": float(np.min(flips))}


# ---- the model --------------------------------------------------------------------------------
def beta_params(mean: float, delta: float) -> tuple[float, float]:
    """Beta(a, b) with the given mean and 2 E[p (1 - p)] = delta."""
    var = mean * (1 - mean) - delta / 2
    k = mean * (1 - mean) / var - 1
    return mean * k, (1 - mean) * k


OLD, NEW = "old: per check, patience 1", "new: spent, patience 2"
RULES = {  # name: (rule, patience); ``spent`` spreads alpha over the schedule's checks
    "old: per check, patience 1": ("per_check", 1),
    "per check, patience 2": ("per_check", 2),
    "spent, patience 1": ("spent", 1),
    "new: spent, patience 2": ("spent", 2),
}


def first_fire(outcomes: np.ndarray, rule: Rule) -> int:
    """Index of the first check at which ``rule`` fires (-1: never)."""
    st = GuardState()
    for t, x in enumerate(outcomes):
        items = x.tolist()
        if judge(st, rule, t, sum(items) / len(items), items) == "fire":
            return t
    return -1


def simulate(rng, n_checks: int, rule: Rule, runs: int, mean: float, delta: float,
             drop: float = 0.0, over: int = 1, start: int = 0, items: int = N_ITEMS) -> list[int]:
    a, b = beta_params(mean, delta)
    shrink = np.clip((np.arange(n_checks) - start + 1) / over, 0, 1) * drop / mean if drop else np.zeros(n_checks)
    fires = []
    for _ in range(runs):
        p = rng.beta(a, b, items)
        probs = p[None, :] * (1 - shrink[:, None])
        fires.append(first_fire(rng.random((n_checks, items)) < probs, rule))
    return fires


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    c = p + z * z / (2 * n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (c - h) / d, (c + h) / d


def run_all(runs: int, power_runs: int, seed: int) -> dict:
    m = measured()
    rng = np.random.default_rng(seed)
    mean = m["start_agreement"]
    out = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "seed": seed, "runs": runs,
           "power_runs": power_runs, "machine": f"{platform.machine()}, {os.cpu_count()} cores (2-core AMD EPYC, "
           f"AVX2 only)", "probe_items": N_ITEMS, "alpha": 0.05, "margin": 0.10, "measured": m,
           "false_alarm": [], "power": []}
    t0 = time.time()
    for label, delta in (("measured mean", m["delta_mean"]), ("measured max", m["delta_max"])):
        for n in (15, 50):
            for name, (kind, patience), items in [(x, y, N_ITEMS) for x, y in RULES.items()] + [(NEW, RULES[NEW], 128)]:
                rule = Rule(margin=0.10, patience=patience, alpha=0.05, rule=kind, checks=n)
                fires = simulate(rng, n, rule, runs, mean, delta, items=items)
                k = sum(f >= 0 for f in fires)
                out["false_alarm"].append({"delta": delta, "delta_from": label, "checks": n, "rule": name,
                                           "items": items,
                                           "level": rule.level(), "patience": patience, "fired": k, "runs": runs,
                                           "rate": k / runs, "ci": wilson(k, runs)})
                print(f"false alarm  delta {delta:.3f} checks {n:2d}  {name:28s} {items:3d} items {k / runs:.4f}", flush=True)
    start = 5  # five healthy checks, then the collapse
    for n in (15, 50):
        for drop in (0.10, 0.20, 0.30):
            for over in (1, 4):
                for name, items in ((OLD, N_ITEMS), (NEW, N_ITEMS), (NEW, 128)):
                    kind, patience = RULES[name]
                    rule = Rule(margin=0.10, patience=patience, alpha=0.05, rule=kind, checks=n)
                    fires = simulate(rng, n, rule, power_runs, mean, m["delta_mean"], drop, over, start, items)
                    early = sum(0 <= f < start for f in fires)
                    lags = [f - start + 1 for f in fires if f >= start]  # 1: at the collapse's first check
                    out["power"].append({
                        "checks": n, "drop": drop, "over": over, "start": start, "rule": name, "items": items,
                        "runs": power_runs,
                        "before_collapse": early / power_runs, "caught": len(lags) / power_runs,
                        "caught_by_over_plus_2": sum(x <= over + 2 for x in lags) / power_runs,
                        "median_lag": float(np.median(lags)) if lags else None})
                    print(f"power checks {n} drop {drop} over {over} {name:28s} {items:3d} items caught {len(lags) / power_runs:.3f}",
                          flush=True)
    out["seconds"] = round(time.time() - t0, 1)
    return out


# ---- the table ----------------------------------------------------------------------------------
def table(res: dict) -> str:
    m = res["measured"]
    lines = [f"Simulated {res['date']} on {res['machine']}, {res['runs']} runs per false-alarm cell and "
             f"{res['power_runs']} per power cell, seed {res['seed']} ({res['seconds']} s). Probe of "
             f"{res['probe_items']} items, margin {res['margin']}, alpha {res['alpha']}; the untrained agreement "
             f"{m['start_agreement']:.3f}; items flipping between two checks: {m['delta_mean']:.3f} on average "
             f"(range {m['delta_min']:.3f}-{m['delta_max']:.3f}) over the deciding run's {len(m['checks']) - 1} "
             f"pairs of checks.", "",
             "**False alarms: the share of runs whose policy does not get worse in which the guard acts at "
             "least once** (95% Wilson interval):", "",
             "| items flipping between checks | checks | rule | probe items | level per check | false alarms per run |",
             "|---|---|---|---|---|---|"]
    for r in res["false_alarm"]:
        lo, hi = r["ci"]
        lines.append(f"| {r['delta']:.3f} ({r['delta_from']}) | {r['checks']} | {r['rule']} | {r['items']} | "
                     f"{r['level']:.4g} | "
                     f"**{100 * r['rate']:.1f} %** [{100 * lo:.1f}, {100 * hi:.1f}] |")
    lines += ["", f"**Power: a collapse after {res['power'][0]['start']} healthy checks**, the mean agreement "
              f"falling by X points over K checks and staying down (items flipping {m['delta_mean']:.3f}). "
              "'caught' = fired at or after the collapse's first check; 'by K+2' = within the K checks of the "
              "fall and two more; lag = checks from the collapse's start to the firing (1 = its first check).", "",
              "| checks | X (points) | K (checks) | rule | probe items | fired before the collapse | caught | "
              "caught by K+2 | median lag |", "|---|---|---|---|---|---|---|---|---|"]
    for r in res["power"]:
        lag = "-" if r["median_lag"] is None else f"{r['median_lag']:g}"
        lines.append(f"| {r['checks']} | {100 * r['drop']:.0f} | {r['over']} | {r['rule']} | {r['items']} | "
                     f"{100 * r['before_collapse']:.1f} % | {100 * r['caught']:.1f} % | "
                     f"{100 * r['caught_by_over_plus_2']:.1f} % | {lag} |")
    return "\n".join(lines)


def write_table(res: dict) -> None:
    text = README.read_text()
    a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
    README.write_text(text[:a] + "\n" + table(res) + "\n" + text[b:])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", action="store_true", help="rebuild the README's table from results.json only")
    ap.add_argument("--runs", type=int, default=4000, help="simulated runs per false-alarm configuration")
    ap.add_argument("--power_runs", type=int, default=1000, help="simulated runs per power configuration")
    ap.add_argument("--seed", type=int, default=61)
    args = ap.parse_args(argv)
    if args.table:
        res = json.loads(RESULTS.read_text())
    else:
        res = run_all(args.runs, args.power_runs, args.seed)
        RESULTS.write_text(json.dumps(res, indent=1) + "\n")
    write_table(res)
    print(f"table written to {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
