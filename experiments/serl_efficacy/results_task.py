"""results.md and curves.png for a GSM8K task (issue 31), from the JSON files in --out.

Primary metric, fixed before any run: held-out greedy pass@1 with the last-number fallback.
Every arm's change is split into its kinds: **format** (boxed rate), **stopping** (share cut at
the token limit) and **correctness** (accuracy among the answers that finished, compared
with a paired bootstrap of the ratio; and, on the problems both arms finished, a paired
McNemar). SVAMP is the transfer benchmark, only evaluated.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from results import delta, finish, load, pct, rate, share_of_gain, train_panels, train_rows

from serl.eval.stats import mcnemar_p, paired_bootstrap, paired_ratio_bootstrap, wilson

TARGET_PTS, TARGET_SHARE, TARGET_SVAMP_LO = 5.0, 0.8, -2.0


def finished(r: dict) -> tuple[list[int], list[int]]:
    """(finished, finished and right) per problem."""
    fin = [1 - t for t in r["truncated"]]
    return fin, [f * c for f, c in zip(fin, r["correct_number"])]


def fin_acc(r: dict) -> str:
    fin, ok = finished(r)
    lo, hi = wilson(sum(ok), sum(fin))
    return f"{sum(ok)}/{sum(fin)} = {100 * sum(ok) / max(1, sum(fin)):.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def fin_delta(base: dict, other: dict) -> tuple[str, float]:
    """Change in accuracy among finished answers (paired bootstrap of the ratio); '-' when an
    arm finished nothing."""
    fa, oa = finished(base)
    fb, ob = finished(other)
    if not sum(fa) or not sum(fb):
        return "- (an arm finished nothing)", float("nan")
    d, lo, hi = paired_ratio_bootstrap(oa, fa, ob, fb)
    return f"{100 * d:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]", lo


def both_finished(base: dict, other: dict) -> str:
    """pass@1 change on the problems both arms finished: correctness with stopping held fixed."""
    idx = [i for i, (x, y) in enumerate(zip(base["truncated"], other["truncated"])) if not x and not y]
    if not idx:
        return "-"
    a = [base["correct_number"][i] for i in idx]
    b = [other["correct_number"][i] for i in idx]
    d, lo, hi = paired_bootstrap(a, b)
    return f"n={len(idx)}: {100 * d:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}], p={mcnemar_p(a, b):.3g}"


def gain_kinds(base: dict, other: dict) -> str:
    """Problems gained over the base: how many the base had cut, how many it finished wrong."""
    gained = [i for i, (x, y) in enumerate(zip(base["correct_number"], other["correct_number"])) if y and not x]
    lost = sum(1 for x, y in zip(base["correct_number"], other["correct_number"]) if x and not y)
    cut = sum(base["truncated"][i] for i in gained)
    return f"+{len(gained)} ({cut} cut by d, {len(gained) - cut} finished wrong by d), -{lost}"


def guard_rows(run_dir: Path) -> list[dict]:
    return [r for r in train_rows(run_dir) if "guard/agreement" in r]


def report(out: Path, arms: list[str], points: int, names: dict) -> str:
    setup = json.loads((out / "setup.json").read_text())
    timings = json.loads((out / "timings.json").read_text())
    s, m = setup["settings"], setup["machine"]
    ev = out / "eval"
    final = {"d": load(out, "d")} | {a: load(out, f"{a}_{points}") for a in arms}
    label = {"d": names["d"][0]} | {a: names[a][0] for a in arms}
    for a in arms:
        if (ev / f"{a}_guard.json").exists():
            final[f"{a}+guard"] = load(out, f"{a}_guard")
            label[f"{a}+guard"] = f"{names[a][0]}, guarded (the policy the guard kept)"
        elif (ev / f"{a}_{points}.json").exists() and a in ("a", "b") and guard_rows(out / f"arm_{a}"):
            final[f"{a}+guard"], label[f"{a}+guard"] = final[a], f"{names[a][0]}, guarded (never fired: its end)"
    svamp = {"d": load(out, "d_svamp")}
    for a in arms:
        svamp[a] = load(out, f"{a}_{points}_svamp")
        if (ev / f"{a}_guard_svamp.json").exists():
            svamp[f"{a}+guard"] = load(out, f"{a}_guard_svamp")
        elif f"{a}+guard" in final:
            svamp[f"{a}+guard"] = svamp[a]
    k, n, nt = final["d"]["k"], final["d"]["n"], svamp["d"]["n"]
    lines = [f"# SeRL efficacy, {s['model']}, task {s['task']}: results"
             f"{' (SMOKE: pipeline check, not a result)' if s['smoke'] else ''}", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, {m['mem_gib']} GiB, {m['platform']}. Started {m['date']}, "
             f"report written {time.strftime('%Y-%m-%d %H:%M %Z')}, commit {m['commit']}.",
             f"Settings: {json.dumps(s)}", "",
             f"Held-out: n = {n} ({out / 'data/heldout.jsonl'}); transfer: SVAMP n = {nt}. 95% Wilson intervals; "
             "changes paired over the same problems (95% paired bootstrap, exact McNemar p).", "",
             f"| arm | steps | training min | pass@1 % | boxed % | maj@{k} % | cut % | mean tokens | "
             "right among finished | SVAMP pass@1 % | SVAMP cut % | SVAMP right among finished |", "|---" * 12 + "|"]
    for a, r in final.items():
        tr = timings["train"].get(a.split("+")[0], [])
        steps, used = (tr[-1]["step"], tr[-1]["minutes_used"]) if tr and a != "d" else (0, 0.0)
        if a.endswith("+guard"):
            steps = r["step"]
        maj = pct(rate(r["maj_number"])) if "maj_number" in r else "-"
        t = svamp[a]
        lines.append(f"| {a}: {label[a]} | {steps} | {used:.1f} | {pct(rate(r['correct_number']))} | "
                     f"{100 * sum(r['boxed']) / n:.1f} | {maj} | {100 * sum(r['truncated']) / n:.1f} | "
                     f"{sum(r['tokens']) / n:.1f} | {fin_acc(r)} | {pct(rate(t['correct_number']))} | "
                     f"{100 * sum(t['truncated']) / nt:.1f} | {fin_acc(t)} |")
    lines += ["", "Change against arm d, by kind (points):", "",
              "| arm - d | pass@1 | problems gained / lost | stopping: cut share | format: boxed rate | "
              "correctness: right among finished | correctness: both finished | SVAMP pass@1 | "
              "SVAMP right among finished |", "|---" * 9 + "|"]
    base, sbase = final["d"], svamp["d"]
    for a in [x for x in final if x != "d"]:
        r, t = final[a], svamp[a]
        lines.append(f"| {a} | {delta(base['correct_number'], r['correct_number'])} | {gain_kinds(base, r)} | "
                     f"{delta(base['truncated'], r['truncated'], p=False)} | {delta(base['boxed'], r['boxed'], p=False)} | "
                     f"{fin_delta(base, r)[0]} | {both_finished(base, r)} | "
                     f"{delta(sbase['correct_number'], t['correct_number'])} | {fin_delta(sbase, t)[0]} |")
    lines += ["", "## Targets", ""] + targets(final, svamp, arms)
    lines += ["", "## Curves (held-out greedy; step 0 is arm d)", "",
              "| arm | point | step | training min | pass@1 % | cut % | right among finished | guard agreement |",
              "|---" * 8 + "|"]
    for a in arms:
        used_at = {e["point"]: e["minutes_used"] for e in timings["train"].get(a, [])}
        g = {r["step"]: r["guard/agreement"] for r in guard_rows(out / f"arm_{a}")}
        for i in range(1, points + 1):
            r = load(out, f"{a}_{i}")
            near = max((st for st in g if st <= r["step"]), default=None)
            lines.append(f"| {a} | {i} | {r['step']} | {used_at.get(i, float('nan')):.1f} | "
                         f"{pct(rate(r['correct_number']))} | {100 * sum(r['truncated']) / n:.1f} | {fin_acc(r)} | "
                         f"{'-' if near is None else f'{g[near]:.3f} (step {near})'} |")
    lines += ["", "## Collapse guard (watch mode: what it saw, and when stop mode would have fired)", ""]
    for a in arms:
        rows = guard_rows(out / f"arm_{a}")
        if rows:
            fired = next((r for r in rows if r.get("guard/fired")), None)
            cost = sum(r.get("guard/probe_s", 0.0) for r in rows)
            lines.append(f"- arm {a}: {len(rows)} checks, {cost / 60:.1f} min of probe generation; agreement "
                         + ", ".join(f"{r['guard/agreement']:.2f}@{r['step']}" for r in rows)
                         + (f"; **fired at step {fired['step']}**, keeping step {fired.get('guard/best_step')}"
                            if fired else "; never fired"))
    text = "\n".join(lines) + "\n"
    (out / "results.md").write_text(text)
    plot(out, final["d"], arms, points)
    return text


def targets(final: dict, svamp: dict, arms: list[str]) -> list[str]:
    out = []
    base = final["d"]
    if "a" in final:
        d_, lo, _ = paired_bootstrap(base["correct_number"], final["a"]["correct_number"])
        fd, flo = fin_delta(base, final["a"])
        out.append(f"- (a) - (d) pass@1 {100 * d_:+.1f} (lower bound {100 * lo:+.1f}), target >= +{TARGET_PTS:g} with "
                   f"the interval above 0; right among finished {fd}, target above 0: **"
                   f"{'met' if 100 * d_ >= TARGET_PTS and lo > 0 and flo > 0 else 'not met'}**")
        if "c" in final:
            sh = share_of_gain(base["correct_number"], final["a"]["correct_number"], final["c"]["correct_number"])
            out.append("- (a)'s share of (c)'s gain: " + ("undefined, (c) did not gain" if sh is None else
                       f"{100 * sh[0]:.0f}% [{100 * sh[1]:.0f}%, {100 * sh[2]:.0f}%], target >= 80%: "
                       f"**{'met' if sh[0] >= TARGET_SHARE else 'not met'}**"))
        _, slo, _ = paired_bootstrap(svamp["d"]["correct_number"], svamp["a"]["correct_number"])
        out.append(f"- SVAMP (a) - (d): lower bound {100 * slo:+.1f}, target >= {TARGET_SVAMP_LO:g}: "
                   f"**{'met' if 100 * slo >= TARGET_SVAMP_LO else 'not met'}**")
    for a in [x for x in final if x.endswith("+guard")]:
        d_ = sum(final[a]["correct_number"]) - sum(base["correct_number"])
        out.append(f"- {a} ends {'at or above' if d_ >= 0 else 'below'} (d) on the held-out set "
                   f"({d_:+d} problems): target not below: **{'met' if d_ >= 0 else 'not met'}**")
    return out


def plot(out: Path, base: dict, arms: list[str], points: int) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(15, 8), layout="constrained")
    axes = fig.subplots(2, 3).ravel()
    fin_rate = lambda r: sum(finished(r)[1]) / max(1, sum(finished(r)[0]))  # noqa: E731
    views = [(lambda r: sum(r["correct_number"]) / len(r["correct_number"]), "held-out pass@1"),
             (fin_rate, "held-out accuracy among finished answers"),
             (lambda r: sum(r["truncated"]) / len(r["truncated"]), "held-out share cut at the limit")]
    for ax, (fn, title) in zip(axes, views):
        for a in arms:
            rs = [base] + [load(out, f"{a}_{i}") for i in range(1, points + 1)]
            ax.plot([r["step"] for r in rs], [100 * fn(r) for r in rs], marker="o", label=f"arm {a}")
        ax.axhline(100 * fn(base), color="grey", ls=":", label="d")
        ax.set(title=title, xlabel="step", ylabel="%")
    ax = axes[3]
    for a in arms:
        rows = guard_rows(out / f"arm_{a}")
        if rows:
            ax.plot([r["step"] for r in rows], [r["guard/agreement"] for r in rows], marker=".", label=f"arm {a}")
            for r in rows:
                if r.get("guard/fired"):
                    ax.axvline(r["step"], ls="--", lw=0.8)
                    break
    ax.set(title="guard: greedy agreement with the untrained vote (probe)", xlabel="step")
    train_panels(out, arms, ((axes[4], "reward/mean", "training reward"),
                             (axes[5], "filter/difficulty/too_easy", "groups dropped as too easy")))
    finish(fig, axes, out)


if __name__ == "__main__":  # rebuild results.md and curves.png, e.g. from items/ (export_items.py)
    import argparse

    from arms import ARMS

    ap = argparse.ArgumentParser(description="results.md and curves.png of a GSM8K task from an --out directory "
                                             "or its export under items/")
    ap.add_argument("out", type=Path)
    ap.add_argument("--arms", default="a,b,c", help="the training arms that were run")
    ap.add_argument("--points", type=int, default=5, help="curve points per arm")
    a = ap.parse_args()
    print(report(a.out, a.arms.split(","), a.points, ARMS))
