"""real_runs.md from items/<run>/ alone (the standard library and serl's pure-Python rule code).

Per run and per guard check: the held-out truth (pass@1, answers cut at the limit, boxed answers,
accuracy among finished answers) beside each candidate signal. Then, per signal, the step at which
its alarm (fixed before the runs, README "The signals' alarms") first sounds, against the step
at which held-out pass@1 first fell more than 5 points below its best so far (the collapse).
The anchor agreement's alarm is replayed from the kept per-item outcomes under both rules, the
old one (per check, patience 1) and today's (spent, patience 2).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import importlib.util  # noqa: E402

# serl/eval/stats.py is pure Python, but its package imports torch: load the one file
_spec = importlib.util.spec_from_file_location("_serl_stats", ROOT / "serl" / "eval" / "stats.py")
_stats = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_stats)
paired_diff_ci = _stats.paired_diff_ci
from serl.run.guard_rule import GuardState, Rule, judge, planned_checks  # noqa: E402

HELDOUT_KEY = "eval/heldout/pass@1"
FALL = 0.05  # the collapse: held-out pass@1 more than 5 points below its best so far
# The candidate signals' alarms, fixed before either run (README): two checks in a row past a line.
FLIP_LINE = 0.30  # share of probe answers that changed since the previous check
VOTE_LINE = 0.90  # the training vote's agreement (mean over the steps since the last check)
ENTROPY_SHARE = 0.5  # token entropy (mean since the last check) at or below half its first check's


def rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def last_per_step(lines: list[dict]) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for r in lines:  # a resume may log a step twice: the later line counts
        out[int(r["step"])] = r
    return out


def merged_per_step(lines: list[dict]) -> dict[int, dict]:
    """metrics.jsonl: a step has several lines (the step, its evaluation, the guard's check); later keys win."""
    out: dict[int, dict] = {}
    for r in lines:
        out.setdefault(int(r["step"]), {}).update(r)
    return out


def heldout(run: Path) -> dict[int, dict]:
    """step -> greedy held-out results: pass@1 items, cut, boxed and right-among-finished."""
    items = {s: r["items"][HELDOUT_KEY] for s, r in last_per_step(rows(run / "eval_items.jsonl")).items()}
    recs: dict[int, dict] = {}
    for r in rows(run / "eval_records.jsonl"):
        if r.get("kind") == "greedy":
            recs.setdefault(int(r["step"]), {})[r["idx"]] = r  # a re-evaluated step: the later one
    out = {}
    for s, it in items.items():
        got = recs.get(s, {})
        fin = [got[i] for i in it["ids"] if i in got and got[i]["finish_reason"] != "length"]
        out[s] = {
            "ids": it["ids"],
            "values": it["values"],
            "pass": sum(it["values"]) / len(it["values"]),
            "cut": (len(got) - len(fin)) / len(got) if got else None,
            "boxed": sum("\\boxed{" in x["response"] for x in got.values()) / len(got) if got else None,
            "fin_acc": sum(x["correct"] for x in fin) / len(fin) if fin else None,
        }
    return out


def replay(checks: list[dict], rule: Rule) -> int | None:
    """The step of the first firing of ``rule`` on the kept per-check outcomes (None: never)."""
    st = GuardState()
    for c in checks:
        items = c["items"]
        if judge(st, rule, c["step"], sum(items) / len(items), items) == "fire":
            return c["step"]
    return None


def two_in_a_row(steps: list[int], hits: list[bool]) -> int | None:
    for i in range(1, len(hits)):
        if hits[i] and hits[i - 1]:
            return steps[i]
    return None


def collapse_step(ev: dict[int, dict]) -> int | None:
    best = None
    for s in sorted(ev):
        p = ev[s]["pass"]
        if best is not None and p < best - FALL - 1e-9:
            return s
        best = p if best is None else max(best, p)
    return None


def fmt(x, spec=".3f"):
    return "" if x is None else format(x, spec)


def run_table(name: str, run: Path) -> list[str]:
    metrics = merged_per_step(rows(run / "metrics.jsonl"))
    ev = heldout(run)
    checks = list(last_per_step(rows(run / "guard_items.jsonl")).values())
    steps = [c["step"] for c in checks]
    out = [f"### {name}", ""]
    out.append(
        "| step | held-out pass@1 | cut | boxed | right among finished | anchor agreement | best (step) | "
        "p vs best | flip rate | vote agreement | vote trend /step | entropy | fired |"
    )
    out.append("|" + "---|" * 13)
    for s in steps:
        m, e = metrics.get(s, {}), ev.get(s, {})
        out.append(
            f"| {s} | {fmt(e.get('pass'))} | {fmt(e.get('cut'), '.2f')} | {fmt(e.get('boxed'), '.2f')} | "
            f"{fmt(e.get('fin_acc'))} | {fmt(m.get('guard/agreement'))} | {fmt(m.get('guard/best'))} "
            f"({m.get('guard/best_step', '')}) | {fmt(m.get('guard/drop_p'), '.3g')} | {fmt(m.get('guard/flip_rate'), '.2f')} | "
            f"{fmt(m.get('guard/vote_agreement_mean'))} | {fmt(m.get('guard/vote_agreement_trend'), '+.4f')} | "
            f"{fmt(m.get('guard/entropy_mean'))} | {m.get('guard/fired', '')} |"
        )
    n = planned_checks(max(steps or [0]), steps[1] - steps[0] if len(steps) > 1 else 1)
    flips = [metrics.get(s, {}).get("guard/flip_rate") for s in steps]
    votes = [metrics.get(s, {}).get("guard/vote_agreement_mean") for s in steps]
    ents = [metrics.get(s, {}).get("guard/entropy_mean") for s in steps]
    first_ent = next((x for x in ents if x is not None), None)
    alarms = {
        "anchor agreement, today's rule (spent, patience 2)": replay(checks, Rule(checks=n)),
        "anchor agreement, the old rule (per check, patience 1)": replay(
            checks, Rule(rule="per_check", patience=1, checks=n)
        ),
        f"flip rate >= {FLIP_LINE}": two_in_a_row(steps, [x is not None and x >= FLIP_LINE for x in flips]),
        f"vote agreement >= {VOTE_LINE}": two_in_a_row(steps, [x is not None and x >= VOTE_LINE for x in votes]),
        f"entropy <= {ENTROPY_SHARE} x its first": two_in_a_row(
            steps, [x is not None and first_ent is not None and x <= ENTROPY_SHARE * first_ent for x in ents]
        ),
    }
    fall = collapse_step(ev)
    best_s = max(sorted(ev), key=lambda s: ev[s]["pass"]) if ev else None
    out += [
        "",
        f"Held-out pass@1: start {fmt(ev.get(0, {}).get('pass'))}, best {fmt(ev.get(best_s, {}).get('pass'))} "
        f"(step {best_s}), end {fmt(ev.get(max(ev), {}).get('pass')) if ev else ''}; first fall of more than "
        f"{FALL * 100:.0f} points below the best so far: {'step ' + str(fall) if fall is not None else 'never'}.",
    ]
    out += [
        "",
        "| signal | first alarm (step) | lead over the fall (steps) | held-out then, vs its best so far |",
        "|---|---|---|---|",
    ]
    for sig, at in alarms.items():
        lead = "" if at is None or fall is None else f"{fall - at:+d}"
        then = ""
        if at is not None and ev:
            before = [ev[s]["pass"] for s in ev if s <= at]
            then = f"{fmt(ev.get(at, {}).get('pass'))} vs {fmt(max(before))}" if at in ev and before else ""
        out.append(f"| {sig} | {at if at is not None else 'never'} | {lead} | {then} |")
    if ev and best_s is not None and max(ev) != best_s:
        end = max(ev)
        d, lo, hi = paired_diff_ci(ev[best_s]["values"], ev[end]["values"])
        d0, lo0, hi0 = paired_diff_ci(ev[0]["values"], ev[end]["values"]) if 0 in ev else (0.0, 0.0, 0.0)
        out += [
            "",
            f"End (step {end}) against the best (step {best_s}): {d * 100:+.1f} [{lo * 100:+.1f}, {hi * 100:+.1f}]; "
            f"against step 0: {d0 * 100:+.1f} [{lo0 * 100:+.1f}, {hi0 * 100:+.1f}] (paired, 95%, Newcombe).",
        ]
    kept = metrics.get(alarms["anchor agreement, today's rule (spent, patience 2)"] or -1, {}).get("guard/best_step")
    if kept is not None and kept in ev and 0 in ev:
        d, lo, hi = paired_diff_ci(ev[0]["values"], ev[kept]["values"])
        best = ev[best_s]["pass"]
        out += [
            "",
            f"Kept policy (what `stop` ends with): step {kept}, held-out {ev[kept]['pass']:.3f}, "
            f"{(best - ev[kept]['pass']) * 100:.1f} points below the run's best; against step 0: "
            f"{d * 100:+.1f} [{lo * 100:+.1f}, {hi * 100:+.1f}] (paired, 95%).",
        ]
    return out + [""]


def write_table(items: Path, dest: Path) -> str:
    parts = ["# The guard on two real runs (generated by `real_runs.py --table` from items/)", ""]
    for name in ("collapse", "improving"):
        if (items / name / "metrics.jsonl").is_file():
            parts += run_table(name, items / name)
    text = "\n".join(parts)
    dest.write_text(text + "\n")
    return text


def plot(items: Path, dest: Path) -> None:
    """real_runs.png: held-out pass@1 and the anchor agreement per check, the firing marked (matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in ("collapse", "improving") if (items / n / "metrics.jsonl").is_file()]
    fig, axes = plt.subplots(1, len(names), figsize=(5.5 * len(names), 3.8), squeeze=False)
    for ax, name in zip(axes[0], names):
        run = items / name
        ev, metrics = heldout(run), merged_per_step(rows(run / "metrics.jsonl"))
        checks = sorted(s for s, m in metrics.items() if "guard/agreement" in m)
        ax.plot(sorted(ev), [ev[s]["pass"] for s in sorted(ev)], "o-", label="held-out pass@1 (200)")
        ax.plot(checks, [metrics[s]["guard/agreement"] for s in checks], "s--", label="anchor agreement (probe 64)")
        ax.plot(checks, [metrics[s].get("guard/flip_rate", float("nan")) for s in checks], "^:", label="flip rate")
        fired = next((s for s in checks if metrics[s].get("guard/fired")), None)
        if fired is not None:
            ax.axvline(fired, color="red", lw=1, label=f"guard fires (step {fired})")
        ax.set(title=name, xlabel="step", ylim=(0, 1))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(dest, dpi=110)


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    print(write_table(here / "items", here / "real_runs.md"))
    if "--plot" in sys.argv:
        plot(here / "items", here / "real_runs.png")
