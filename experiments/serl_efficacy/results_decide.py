"""results.md and curves.png of the deciding run (issue 49) and of the fifth round (issue 62),
from their kept items alone.

    python experiments/serl_efficacy/results_decide.py experiments/serl_efficacy/items/decide
    python experiments/serl_efficacy/results_decide.py experiments/serl_efficacy/items/round5_gsm8k_2to3

Primary metric, fixed before any run: held-out greedy pass@1 (last-number fallback). Every
evaluation is paired with arm d evaluated on the same kind of machine (``machine`` in its file).
Each change is split into its kinds: stopping (share cut at the limit), format (boxed rate) and
correctness (accuracy among finished answers; pass@1 on the problems both arms finished).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from results import delta, finish, pct, rate, share_of_gain, train_panels, train_rows  # noqa: E402
from results_task import both_finished, fin_acc, fin_delta, finished, gain_kinds  # noqa: E402

from serl.eval.stats import paired_bootstrap  # noqa: E402
from serl.run.hooks import BUDGET_KEY  # noqa: E402

NAMES = {"c": "seed labels", "a": "SeRL, guard acting", "a0": "SeRL, guard watching", "d": "no training"}
TARGET_C, TARGET_A, TARGET_SHARE, TARGET_LO = 8.0, 4.0, 0.5, -2.0
TARGET_SVAMP5 = -1.0  # the fifth round's SVAMP line: a - d's lower bound


def fifth(s: dict) -> bool:
    """The fifth round's items (round5.py): its targets, and its end is the step budget, not maj@K."""
    return "extra_points" in s


def is_end(r: dict, s: dict) -> bool:
    return "maj_number" in r or (fifth(s) and r["step"] >= s["steps"])


def load_all(items: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((items / "eval").glob("*.json"))}


def points(ev: dict, arm: str) -> list[dict]:
    """An arm's greedy held-out evaluations, by step."""
    rs = [r for t, r in ev.items() if t.startswith(f"{arm}_") and t[len(arm) + 1:].isdigit()]
    return sorted(rs, key=lambda r: r["step"])


def base_for(ev: dict, r: dict, svamp: bool = False) -> dict | None:
    """Arm d evaluated on the machine kind ``r`` was evaluated on."""
    return ev.get(f"d_{r.get('machine', '')}{'_svamp' if svamp else ''}")


def stopped_at(items: Path, arm: str) -> dict[int, int]:
    """{step the guard stopped the run at: the step whose policy it kept}: that step's evaluation
    is of the kept policy (the run's final model), not of the last update."""
    return {r["step"]: int(r["guard/best_step"]) for r in train_rows(items / f"arm_{arm}")
            if r.get("guard/action") == 2}


def label(step: int, stops: dict[int, int]) -> str:
    return f"{step} (guard stop: step {stops[step]}'s policy)" if step in stops else str(step)


def pts(base: list, other: list) -> tuple[float, float, float]:
    d, lo, hi = paired_bootstrap(base, other)
    return 100 * d, 100 * lo, 100 * hi


def report(items: Path) -> str:
    ev, setup = load_all(items), json.loads((items / "setup.json").read_text())
    timings = json.loads((items / "timings.json").read_text())
    s = setup["settings"]
    arms = [a for a in ("c", "a", "a0") if points(ev, a)]
    # an arm's end carries maj@K; before it, its newest point is shown but no target is judged
    latest = {a: points(ev, a)[-1] for a in arms}
    ends = {a: r for a, r in latest.items() if is_end(r, s)}
    title = "The fifth round" if fifth(s) else "The deciding run"
    lines = [f"# {title}: {s['model']}, task {s['task']}{' (SMOKE: pipeline check only)' if s['smoke'] else ''}",
             "", f"Report written {time.strftime('%Y-%m-%d %H:%M %Z')} from `{items}` alone.", "",
             "Sessions (machine, date, commit): " + "; ".join(
                 f"{m['cpu']} ({m['cores']} cores, {m['mem_gib']} GiB), {m['date']}, {m['commit']}"
                 for m in setup.get("sessions", [setup["machine"]])), "",
             f"Settings: {json.dumps(s)}", "",
             "## Arm d (no training), per machine kind", "",
             "| machine | pass@1 % | maj@K % | cut % | boxed % | right among finished | SVAMP pass@1 % |", "|---" * 7 + "|"]
    for t, r in ev.items():
        if t.startswith("d_") and not t.endswith("_svamp"):
            sv = ev.get(f"{t}_svamp")
            maj = pct(rate(r["maj_number"])) if "maj_number" in r else "-"
            lines.append(f"| {t[2:]} | {pct(rate(r['correct_number']))} | {maj} | "
                         f"{100 * sum(r['truncated']) / r['n']:.1f} | {100 * sum(r['boxed']) / r['n']:.1f} | {fin_acc(r)} | "
                         f"{pct(rate(sv['correct_number'])) if sv else '-'} |")
    lines += ["", "## Curves: held-out greedy, every evaluation against d on its machine", "",
              "| arm | step | training min | machine | pass@1 % | vs d (paired 95% CI, McNemar) | cut % | boxed % | "
              "right among finished | guard agreement |", "|---" * 10 + "|"]
    for a in arms:
        rows = train_rows(items / f"arm_{a}")  # a segment cut by a stop has no timing; its metrics count
        used = {r["step"]: r[BUDGET_KEY] for r in rows if BUDGET_KEY in r}
        used.update({e["step"]: e["minutes_used"] for e in timings["train"].get(a, [])})
        g = {r["step"]: r["guard/agreement"] for r in rows if "guard/agreement" in r}
        stops = stopped_at(items, a)
        for r in points(ev, a):
            b = base_for(ev, r)
            # a guard stop's point is the kept step's policy: show that step's probe reading
            near = stops[r["step"]] if r["step"] in stops else max((st for st in g if st <= r["step"]), default=None)
            lines.append(f"| {a} | {label(r['step'], stops)} | {used.get(r['step'], float('nan')):.1f} | {r.get('machine', '?')} | "
                         f"{pct(rate(r['correct_number']))} | {delta(b['correct_number'], r['correct_number']) if b else '-'} | "
                         f"{100 * sum(r['truncated']) / r['n']:.1f} | {100 * sum(r['boxed']) / r['n']:.1f} | {fin_acc(r)} | "
                         f"{'-' if near is None else f'{g[near]:.3f} (step {near})'} |")
    lines += ["", "## Each arm's end against d, by kind of gain (points)", "",
              "| arm - d | step | pass@1 | gained / lost | stopping: cut share | format: boxed rate | correctness: right "
              "among finished | correctness: both finished | maj@K | SVAMP pass@1 | SVAMP right among finished |",
              "|---" * 11 + "|"]
    for a in arms + [t for t in ev if t.endswith("_guard")]:
        r = latest.get(a) or ev[a]
        b, sv = base_for(ev, r), ev.get(f"{r['tag']}_svamp")
        sb = base_for(ev, r, svamp=True)
        if b is None:
            lines.append(f"| {a} | {r['step']} | no arm d on {r.get('machine')} yet |" + " |" * 8)
            continue
        maj = (delta(b["maj_number"], r["maj_number"]) if "maj_number" in r and "maj_number" in b else "-")
        stops = stopped_at(items, a) if a in latest else {}
        step = f"{label(r['step'], stops)}{'' if a in ends or a not in latest else ' (running)'}"
        lines.append(f"| {a} | {step} | {delta(b['correct_number'], r['correct_number'])} | {gain_kinds(b, r)} | "
                     f"{delta(b['truncated'], r['truncated'], p=False)} | {delta(b['boxed'], r['boxed'], p=False)} | "
                     f"{fin_delta(b, r)[0]} | {both_finished(b, r)} | {maj} | "
                     f"{delta(sb['correct_number'], sv['correct_number']) if sv and sb else '-'} | "
                     f"{fin_delta(sb, sv)[0] if sv and sb else '-'} |")
    if fifth(s):
        lines += ["", "## Targets (issue 62), judged at each arm's end", ""] + targets5(ev, ends, s)
    else:
        lines += ["", "## Targets (issue 49), judged at each arm's end", ""] + targets(ev, ends)
    lines += [f"- arm {a}: running, newest point step {r['step']}; not judged yet" for a, r in latest.items()
              if a not in ends]
    lines += ["", "## The collapse guard's decisions", ""] + guard_lines(items, arms)
    lines += ["", "## Wall time", ""]
    for a in arms:
        tr = timings["train"].get(a, [])
        last = ([r for r in train_rows(items / f"arm_{a}") if BUDGET_KEY in r] or [None])[-1]
        evs = [e for t, es in timings["eval"].items() if t.startswith(f"{a}_") for e in es]
        # a segment that a session's stop killed never wrote its timing; the metrics count its steps
        lines.append(f"- arm {a}: {len(tr)} training segments that ran to their end, {sum(e['wall_s'] for e in tr) / 3600:.2f} h "
                     f"of `serl train` wall time (segments cut by a stop are not timed); "
                     f"{last[BUDGET_KEY] if last else 0:.1f} min of training steps to step "
                     f"{last['step'] if last else 0}; evaluations {sum(sum(v for k, v in e.items() if k.endswith('_s')) for e in evs) / 60:.0f} min")
    text = "\n".join(lines) + "\n"
    (items / "results.md").write_text(text)
    try:
        plot(items, ev, arms)
    except ImportError as e:  # the tables need the standard library alone; the curves need matplotlib
        print(f"curves.png not drawn: {e}", file=sys.stderr)
    return text


def targets(ev: dict, ends: dict) -> list[str]:
    out, ok = [], lambda b: "**met**" if b else "**not met**"  # noqa: E731
    gains = {}
    for a, need in (("c", TARGET_C), ("a", TARGET_A)):
        if a in ends and (b := base_for(ev, ends[a])):
            d, lo, hi = gains[a] = pts(b["correct_number"], ends[a]["correct_number"])
            out.append(f"- ({a}) - (d) = {d:+.1f} [{lo:+.1f}, {hi:+.1f}] points, target >= +{need:g} with the interval "
                       f"above 0: {ok(d >= need and lo > 0)}")
    if "a" in gains:
        out.append(f"- (a) ends no lower than (d): lower bound {gains['a'][1]:+.1f}, target >= {TARGET_LO:g}: "
                   f"{ok(gains['a'][1] >= TARGET_LO)}")
    if "a" in gains and "c" in gains:  # each gain against d on its own machine kind; problems resampled together
        b, bc = base_for(ev, ends["a"]), base_for(ev, ends["c"])
        sh = share_of_gain(b["correct_number"], ends["a"]["correct_number"], ends["c"]["correct_number"],
                           dc=bc["correct_number"])
        out.append("- (a)'s share of (c)'s gain: " + ("undefined, (c) did not gain" if sh is None else
                   f"{100 * sh[0]:.0f}% [{100 * sh[1]:.0f}%, {100 * sh[2]:.0f}%], target >= 50%: "
                   f"{ok(sh[0] >= TARGET_SHARE)}" + ("; not informative: (c)'s own gain is not above 0, so "
                                                    "the share's interval is unbounded" if gains["c"][1] <= 0 else "")))
    if "a" in ends and (sv := ev.get(f"{ends['a']['tag']}_svamp")) and (sb := base_for(ev, ends["a"], True)):
        d, lo, hi = pts(sb["correct_number"], sv["correct_number"])
        out.append(f"- SVAMP (a) - (d) = {d:+.1f} [{lo:+.1f}, {hi:+.1f}], lower bound target >= {TARGET_LO:g}: "
                   f"{ok(lo >= TARGET_LO)}")
    return out or ["- no trained arm has ended on a machine where arm d was evaluated"]


def end_window(ev: dict, arm: str, s: dict) -> list[dict]:
    """The arm's points from the first extra point on (steps 90, 95 and 100): its end, with the
    checkpoint-to-checkpoint jitter averaged, all evaluated on one machine kind."""
    return [r for r in points(ev, arm) if r["step"] >= min(s["extra_points"])]


def targets5(ev: dict, ends: dict, s: dict) -> list[str]:
    """Issue 62's lines: c - d >= +8 and a - d >= +4 over the end window (each problem's mean over
    its points), intervals above 0; a never below d by more than 2 points (the lower bound at every
    point); SVAMP a - d's lower bound >= -1."""
    out, ok = [], lambda b: "**met**" if b else "**not met**"  # noqa: E731
    for a, need in (("c", TARGET_C), ("a", TARGET_A)):
        if a not in ends or not (b := base_for(ev, ends[a])):
            continue
        win = [r for r in end_window(ev, a, s) if r.get("machine") == ends[a].get("machine")]
        mean = [sum(col) / len(col) for col in zip(*(r["correct_number"] for r in win))]
        d, lo, hi = pts(b["correct_number"], mean)
        e, elo, ehi = pts(b["correct_number"], ends[a]["correct_number"])
        out.append(f"- ({a}) - (d), mean of steps {', '.join(str(r['step']) for r in win)} = {d:+.1f} [{lo:+.1f}, "
                   f"{hi:+.1f}] points (step {ends[a]['step']} alone: {e:+.1f} [{elo:+.1f}, {ehi:+.1f}]), target >= "
                   f"+{need:g} with the interval above 0: {ok(d >= need and lo > 0)}")
    if "a" in ends:
        lows = [(r["step"], pts(b["correct_number"], r["correct_number"])[1]) for r in points(ev, "a")
                if (b := base_for(ev, r))]
        step, low = min(lows, key=lambda x: x[1])
        out.append(f"- (a) never below (d): lowest lower bound {low:+.1f} (step {step}), target >= {TARGET_LO:g}: "
                   f"{ok(low >= TARGET_LO)}")
        if (sv := ev.get(f"{ends['a']['tag']}_svamp")) and (sb := base_for(ev, ends["a"], True)):
            d, lo, hi = pts(sb["correct_number"], sv["correct_number"])
            out.append(f"- SVAMP (a) - (d) = {d:+.1f} [{lo:+.1f}, {hi:+.1f}], lower bound target >= {TARGET_SVAMP5:g}: "
                       f"{ok(lo >= TARGET_SVAMP5)}")
    return out or ["- no trained arm has ended on a machine where arm d was evaluated"]


def guard_lines(items: Path, arms: list[str]) -> list[str]:
    out = []
    names = {1: "would stop (watch)", 2: "stopped the run", 3: "rolled back"}
    for a in arms:
        rows = [r for r in train_rows(items / f"arm_{a}") if "guard/agreement" in r]
        if not rows:
            continue
        acts = [f"step {r['step']}: {names.get(int(r['guard/action']), '?')}, kept step {r.get('guard/best_step')}"
                for r in rows if r.get("guard/action")]
        out.append(f"- arm {a}: {len(rows)} checks ({sum(r.get('guard/probe_s', 0.0) for r in rows) / 60:.1f} min of "
                   "probe generation); agreement " + ", ".join(f"{r['guard/agreement']:.2f}@{r['step']}" for r in rows)
                   + ("; " + "; ".join(acts) if acts else "; never fired"))
    return out or ["- no guarded arm has run yet"]


COLORS = {"c": "C0", "a": "C1", "a0": "C2"}


def plot(items: Path, ev: dict, arms: list[str]) -> None:
    """Each evaluation as a change against d on its own machine kind, so points from two machines share an axis."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(15, 8), layout="constrained")
    axes = fig.subplots(2, 3).ravel()
    acc = lambda r: sum(finished(r)[1]) / max(1, sum(finished(r)[0]))  # noqa: E731
    for a in arms:
        rs = [(r, b) for r in points(ev, a) if (b := base_for(ev, r))]
        if not rs:
            continue
        b = rs[0][1]
        rs = [(b, b)] + rs  # step 0 is the untrained policy, which is arm d itself
        steps = [0] + [r["step"] for r, _ in rs[1:]]
        ci = [(0.0, 0.0, 0.0)] + [pts(b["correct_number"], r["correct_number"]) for r, b in rs[1:]]
        axes[0].errorbar(steps, [d for d, _, _ in ci], yerr=[[d - lo for d, lo, _ in ci], [hi - d for d, _, hi in ci]],
                         marker="o", capsize=3, color=COLORS[a], label=f"arm {a}")
        for st, kept in stopped_at(items, a).items():  # that point's weights are an earlier step's
            if st in steps:
                axes[0].annotate(f"guard stop:\nstep {kept}'s policy", (st, ci[steps.index(st)][0]),
                                 textcoords="offset points", xytext=(6, -24), fontsize=8, color=COLORS[a])
        axes[1].plot(steps, [100 * (acc(r) - acc(b)) for r, b in rs], marker="o", color=COLORS[a], label=f"arm {a}")
        axes[2].plot(steps, [100 * (sum(r["truncated"]) - sum(b["truncated"])) / r["n"] for r, b in rs],
                     marker="o", color=COLORS[a], label=f"arm {a}")
    axes[0].axhline(TARGET_C, color="C0", ls=":", lw=0.8, label=f"target (c): +{TARGET_C:g}")
    axes[0].axhline(TARGET_A, color="C1", ls=":", lw=0.8, label=f"target (a): +{TARGET_A:g}")
    for ax, title in zip(axes[:3], ("held-out pass@1 (95% paired CI)", "accuracy among finished answers",
                                    "share cut at the limit")):
        ax.axhline(0, color="grey", lw=0.8)
        ax.set(title=f"{title}: arm - d, same machine", xlabel="step", ylabel="points")
    ax = axes[3]
    for a in arms:
        rows = [r for r in train_rows(items / f"arm_{a}") if "guard/agreement" in r]
        if rows:
            ax.plot([r["step"] for r in rows], [r["guard/agreement"] for r in rows], marker=".", color=COLORS[a],
                    label=f"arm {a}")
            for r in rows:
                if r.get("guard/action"):
                    ax.axvline(r["step"], ls="--", lw=0.8, color=COLORS[a],
                               label=f"arm {a} guard acted, kept step {r.get('guard/best_step')}")
    ax.set(title="guard: agreement with the untrained vote", xlabel="step")
    train_panels(items, arms, ((axes[4], "reward/mean", "training reward"),
                               (axes[5], "filter/difficulty/too_easy", "groups dropped as too easy")), COLORS)
    finish(fig, axes, items)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    print(report(Path(sys.argv[1])))
