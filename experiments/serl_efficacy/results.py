"""results.md and curves.png of the efficacy experiment, from the JSON files in --out.

Primary metric, fixed before any run: greedy pass@1 with the last-number fallback (the grader
serl trains and evaluates with). Boxed-only pass@1 stands next to it: the difference between
their gains is format (writing \\boxed{}), the last-number gain is correctness.
"""
from __future__ import annotations

import json
import random
import time
from pathlib import Path

from serl.eval.stats import mcnemar_p, paired_bootstrap, wilson

TARGET_PTS, TARGET_SHARE = 5.0, 0.8


def load(out: Path, tag: str) -> dict:
    return json.loads((out / "eval" / f"{tag}.json").read_text())


def rate(xs: list) -> tuple[float, float, float]:
    return (sum(xs) / len(xs), *wilson(sum(xs), len(xs)))


def pct(t) -> str:
    return f"{100 * t[0]:.1f} [{100 * t[1]:.1f}, {100 * t[2]:.1f}]"


def delta(base: list, other: list, scale: float = 100.0, p: bool = True) -> str:
    d, lo, hi = paired_bootstrap(base, other)
    s = f"{scale * d:+.1f} [{scale * lo:+.1f}, {scale * hi:+.1f}]"
    return s + (f", p={mcnemar_p(base, other):.3g}" if p else "")


def share_of_gain(d: list, a: list, c: list, reps: int = 10000, seed: int = 0, dc: list | None = None):
    """(a - d) / (c - dc) in mean pass@1, with a 95% percentile interval over problems
    resampled together; None when (c)'s gain is not positive. ``dc``: the untrained model
    on (c)'s machine kind when (c) ran on another one (default ``d``)."""
    n, dc = len(d), d if dc is None else dc
    gain = lambda idx: (sum(a[i] - d[i] for i in idx), sum(c[i] - dc[i] for i in idx))  # noqa: E731
    ga, gc = gain(range(n))
    if gc <= 0:
        return None
    rng, ratios = random.Random(seed), []
    for _ in range(reps):
        x, y = gain([rng.randrange(n) for _ in range(n)])
        ratios.append(x / y if y > 0 else float("-inf"))  # no gain of (c) in a resample: counts low
    ratios.sort()
    return ga / gc, ratios[int(0.025 * reps)], ratios[int(0.975 * reps) - 1]


def train_rows(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def mean_of(rows: list[dict], key: str) -> float:
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return sum(vals) / len(vals) if vals else float("nan")


def heldout_overlap(run_dir: Path, heldout: list[str]) -> tuple[int, int]:
    """(generated problems, of them equal to a held-out problem up to case and spacing)."""
    from serl.recipes.serl.instruct.pool import POOL_FILE, PromptPool

    if not (run_dir / POOL_FILE).exists():
        return 0, 0
    norm = lambda s: " ".join(s.lower().split())  # noqa: E731
    held = {norm(t) for t in heldout}
    gen = [it.text for it in PromptPool.load(run_dir).generated()]
    return len(gen), sum(norm(t) in held for t in gen)


def report(out: Path, arms: list[str], points: int, names: dict) -> str:
    setup = json.loads((out / "setup.json").read_text())
    timings = json.loads((out / "timings.json").read_text())
    final = {"d": load(out, "d")} | {a: load(out, f"{a}_{points}") for a in arms}
    curve = {a: [load(out, f"{a}_{i}") for i in range(1, points + 1)] for a in arms}
    k, n, m = final["d"]["k"], final["d"]["n"], setup["machine"]
    s = setup["settings"]
    lines = [f"# SeRL efficacy, {s.get('model', 'smollm2')}: results{' (SMOKE: pipeline check, not a result)' if s['smoke'] else ''}", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, {m['mem_gib']} GiB, {m['platform']}; load average at "
             f"start {', '.join(f'{x:.1f}' for x in m['loadavg_at_start'])}. Started {m['date']}, report written "
             f"{time.strftime('%Y-%m-%d %H:%M %Z')}, commit {m['commit']}.",
             f"Settings: {json.dumps(s)}", "",
             f"Held-out: n = {n} problems (dataset/arith_efficacy_heldout.jsonl). 95% Wilson intervals; "
             "deltas paired over the same problems (95% paired-bootstrap interval, exact McNemar p).", "",
             f"| arm | steps | training min | wall min (train + eval) | pass@1 last-number % | pass@1 boxed-only % | "
             f"maj@{k} last-number % | maj@{k} boxed-only % | boxed rate % | mean length (tokens) | cut at limit % |",
             "|---" * 11 + "|"]
    wall = {}
    for a, r in final.items():
        tr = timings["train"].get(a, [])
        ev = sum(sum(e.get(x, 0.0) for x in ("engine_start_s", "greedy_s", "sample_s"))
                 for t, es in timings["eval"].items() if t == a or t.startswith(f"{a}_") for e in es)
        wall[a] = (sum(e["wall_s"] for e in tr) + ev) / 60
        steps, used = (tr[-1]["step"], tr[-1]["minutes_used"]) if tr else (0, 0.0)
        maj = [pct(rate(r[f"maj_{x}"])) if f"maj_{x}" in r else "-" for x in ("number", "boxed")]
        lines.append(f"| {a}: {names[a][0]} | {steps} | {used:.1f} | {wall[a]:.1f} | "
                     f"{pct(rate(r['correct_number']))} | {pct(rate(r['correct_boxed']))} | {maj[0]} | {maj[1]} | {pct(rate(r['boxed']))} | "
                     f"{sum(r['tokens']) / n:.1f} | {100 * sum(r['truncated']) / n:.1f} |")
    lines += ["", "Change against arm d (points; mean length in tokens):", "",
              f"| comparison | pass@1 last-number | pass@1 boxed-only | maj@{k} last-number | boxed rate | "
              "mean length |", "|---" * 6 + "|"]
    pairs = [(a, "d") for a in arms] + ([("a", "b")] if {"a", "b"} <= set(arms) else [])
    for x, y in pairs:
        rx, ry = final[x], final[y]
        maj = delta(ry["maj_number"], rx["maj_number"]) if "maj_number" in rx and "maj_number" in ry else "-"
        lines.append(f"| {x} - {y} | {delta(ry['correct_number'], rx['correct_number'])} | "
                     f"{delta(ry['correct_boxed'], rx['correct_boxed'])} | {maj} | "
                     f"{delta(ry['boxed'], rx['boxed'], p=False)} | {delta(ry['tokens'], rx['tokens'], 1.0, False)} |")
    lines += ["", "## Target", ""]
    if "a" in arms:
        d_, lo, hi = paired_bootstrap(final["d"]["correct_number"], final["a"]["correct_number"])
        ok = 100 * d_ >= TARGET_PTS and lo > 0
        lines.append(f"- (a) over (d), pass@1 last-number: {100 * d_:+.1f} pts [{100 * lo:+.1f}, {100 * hi:+.1f}]: "
                     f"target >= +{TARGET_PTS:g} pts with the interval above 0: **{'met' if ok else 'not met'}**.")
        if "c" in arms:
            sh = share_of_gain(final["d"]["correct_number"], final["a"]["correct_number"],
                               final["c"]["correct_number"])
            lines.append("- (a)'s gain as a share of (c)'s: " + (
                "undefined, (c) did not gain" if sh is None else
                f"{100 * sh[0]:.0f}% [{100 * sh[1]:.0f}%, {100 * sh[2]:.0f}%]: target >= {100 * TARGET_SHARE:.0f}%: "
                f"**{'met' if sh[0] >= TARGET_SHARE else 'not met'}**."))
    lines += ["", "## Curves (greedy, held-out; step 0 is arm d)", "",
              "| arm | point | step | training min | pass@1 last-number % | pass@1 boxed-only % | boxed rate % | "
              "mean length |", "|---" * 8 + "|"]
    for a in arms:
        used_at = {e["point"]: e["minutes_used"] for e in timings["train"].get(a, [])}  # a retry's entry wins
        for i, r in enumerate(curve[a]):
            used = used_at.get(i + 1, float("nan"))
            lines.append(f"| {a} | {i + 1} | {r['step']} | {used:.1f} | {pct(rate(r['correct_number']))} | "
                         f"{pct(rate(r['correct_boxed']))} | {pct(rate(r['boxed']))} | {sum(r['tokens']) / n:.1f} |")
    lines += ["", "## Training (metrics.jsonl: first quarter of steps -> last quarter)", ""]
    heldout_texts = [json.loads(x)["problem"] for x in (Path(__file__).resolve().parents[2] / "dataset" /
                                                      "arith_efficacy_heldout.jsonl").read_text().splitlines()]
    for a in arms:
        rows = [r for r in train_rows(out / f"arm_{a}") if "reward/mean" in r]
        if not rows:
            continue
        q = max(1, len(rows) // 4)
        parts = [f"{key} {mean_of(rows[:q], key):.3f} -> {mean_of(rows[-q:], key):.3f}"
                 for key in ("reward/mean", "reward/agreement", "response/truncated_frac", "response/length_mean",
                             "train/batch_prompts") if any(key in r for r in rows)]
        step_s = mean_of(rows, "time/step")
        gen, same = heldout_overlap(out / f"arm_{a}", heldout_texts)
        lines.append(f"- arm {a}: {len(rows)} steps, {step_s:.0f} s per step; " + "; ".join(parts) +
                     (f"; {gen} generated problems, {same} equal to a held-out problem" if gen else ""))
    lines += ["", "Evaluation cost (s): " + "; ".join(
        f"{t}: start {e[-1]['engine_start_s']:.0f}, greedy {e[-1]['greedy_s']:.0f} "
        f"({e[-1]['greedy_tokens'] / max(e[-1]['greedy_s'], 1e-9):.0f} tok/s)"
        + (f", x{e[-1]['k']} {e[-1]['sample_s']:.0f} ({e[-1]['sample_tokens'] / max(e[-1]['sample_s'], 1e-9):.0f} "
           "tok/s)" if e[-1].get("k") else "") for t, e in timings["eval"].items())]
    text = "\n".join(lines) + "\n"
    (out / "results.md").write_text(text)
    plot(out, final["d"], curve, arms)
    return text


def plot(out: Path, base: dict, curve: dict, arms: list[str]) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(15, 8), layout="constrained")
    axes = fig.subplots(2, 3).ravel()
    held = [("correct_number", "pass@1, last-number fallback (%)"), ("correct_boxed", "pass@1, boxed only (%)"),
            ("boxed", "\\boxed{} rate (%)")]
    span = max([r["step"] for a in arms for r in curve[a]] + [1])
    for ax, (key, title) in zip(axes, held):
        for j, a in enumerate(arms):  # arms side by side, so equal points stay visible
            rs = [base] + curve[a]
            ys = [rate(r[key]) for r in rs]
            ax.errorbar([r["step"] + (j - 1) * 0.01 * span for r in rs], [100 * y[0] for y in ys],
                        yerr=[[100 * (y[0] - y[1]) for y in ys], [100 * (y[2] - y[0]) for y in ys]],
                        marker="o", capsize=3, label=f"arm {a}")
        ax.set(title=f"held-out {title}, 95% Wilson", xlabel="step", ylabel="%")
    ax = axes[3]
    for a in arms:
        rs = [base] + curve[a]
        ax.plot([r["step"] for r in rs], [sum(r["tokens"]) / len(r["tokens"]) for r in rs], marker="o",
                label=f"arm {a}")
    ax.set(title="held-out mean greedy response length", xlabel="step", ylabel="tokens")
    train_panels(out, arms, ((axes[4], "reward/mean", "training reward (a, b: vote agreement; c: correct)"),
                             (axes[5], "response/truncated_frac", "training responses cut at the limit")))
    finish(fig, axes, out)


def train_panels(out: Path, arms: list[str], panels, colors: dict | None = None) -> None:
    """One training metric per (axis, key, title), a line per arm, from its metrics.jsonl."""
    for ax, key, title in panels:
        for a in arms:
            pts = [(r["step"], r[key]) for r in train_rows(out / f"arm_{a}") if key in r]
            if pts:
                ax.plot(*zip(*pts), marker=".", label=f"arm {a}", color=(colors or {}).get(a))
        ax.set(title=title, xlabel="step")


def finish(fig, axes, out: Path) -> None:
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.savefig(out / "curves.png", dpi=110)
