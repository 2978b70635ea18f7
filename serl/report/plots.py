"""The figures of ``serl report``: one builder per group of metrics (``PLOTS``), each
claiming the keys it drew, and a generic figure per namespace for the keys no builder
drew. Which builders a run gets is its recipe's ``REPORT`` (``serl.report.panels``); a recipe's own
figures (SPIN's preferences, SPELL's roles, SPIRAL's games) live in its folder, built from
``panels_plot`` here."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from serl.report.run_metrics import Series


def _smooth(values: list[float]) -> tuple[list[float], int] | None:
    """Centered moving average for noisy per-step curves; None when too few points."""
    half = len(values) // 40  # window of about 5% of the run, at least 3 points
    if half < 1:
        return None
    out = []
    for i in range(len(values)):
        chunk = values[max(0, i - half) : i + half + 1]
        out.append(sum(chunk) / len(chunk))
    return out, 2 * half + 1


def clip(text: str, n: int = 60) -> str:
    """A key as a plot shows it: at most ``n`` characters (a 100,000-character key made
    matplotlib lay out its title for minutes)."""
    text = str(text)
    return text if len(text) <= n else text[: n - 3] + "..."


def file_stem(text: str, n: int = 40) -> str:
    """A key's namespace as part of a file name: short, and only safe characters."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(text))[:n] or "_"


def _draw(ax, series: Series, label: str, color: str | None = None, smooth: bool = True) -> int:
    """Plot one series; returns the moving-average window used (0 when raw)."""
    label = clip(label)
    steps, values = series.finite()
    if not steps:
        return 0
    smoothed = _smooth(values) if smooth else None
    if smoothed is None:
        marker = "o" if len(steps) <= 40 else None
        ax.plot(steps, values, label=label, color=color, marker=marker, markersize=4, linewidth=1.8)
        return 0
    averaged, window = smoothed
    (raw,) = ax.plot(steps, values, color=color, alpha=0.25, linewidth=1)
    ax.plot(steps, averaged, color=raw.get_color(), linewidth=2, label=label)
    return window


def _new_figure(panels: int, cols: int = 1, height: float = 3.4):
    from matplotlib.figure import Figure

    cols = max(1, min(cols, panels))
    rows = math.ceil(panels / cols)
    fig = Figure(figsize=(7.5 * cols if cols > 1 else 10, height * rows + 0.6), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[panels:]:
        ax.set_visible(False)
    return fig, axes[:panels]


def _style(ax, title: str, ylabel: str, window: int = 0) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.set_title(clip(title), fontsize=12)
    ax.set_xlabel("training step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(clip(ylabel, 40))
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        # Say what the bold line is when it is an average over the faint per-step one.
        note = f"bold: {window}-step moving average" if window else None
        ax.legend(fontsize=9, loc="best", title=note, title_fontsize=8)


def panels_plot(title: str, panels: list[tuple], cols: int = 1, smooth: bool = True):
    """panels: (panel title, y label, [(legend label, series)][, smooth]); empty panels are left out."""
    panels = [p for p in panels if any(s.finite()[0] for _, s in p[2])]
    if not panels:
        return None
    fig, axes = _new_figure(len(panels), cols)
    for ax, (ptitle, ylabel, lines, *flag) in zip(axes, panels):
        smooth_this = smooth and (flag[0] if flag else True)
        window = max([_draw(ax, ser, label, smooth=smooth_this) for label, ser in lines] or [0])
        _style(ax, ptitle, ylabel, window)
    if len(panels) == 1:  # one panel: its own title says it all
        axes[0].set_title(clip(panels[0][0]), fontsize=14, fontweight="bold")
    else:
        fig.suptitle(clip(title, 80), fontsize=14, fontweight="bold")
    return fig


def short_key(key: str) -> str:
    return key.split("/", 1)[1] if "/" in key else key


def plot_reward(run, claimed: set[str]):
    s = run.series
    fractions = [k for k in ("reward/mean", "reward/agreement", "reward/no_answer_frac") if k in s]
    labels = {
        "reward/mean": "mean reward",
        "reward/agreement": "agreement with majority",
        "reward/no_answer_frac": "no extractable answer",
    }
    panels = [("Self-reward (fraction of responses)", "fraction", [(labels[k], s[k]) for k in fractions])]
    if "reward/clusters" in s:
        panels.append(("Distinct answers per prompt", "answer clusters", [("clusters", s["reward/clusters"])]))
    claimed.update(fractions + ["reward/clusters"])
    fig = panels_plot("Reward and agreement", panels)
    if fig is not None and fractions:
        fig.axes[0].set_ylim(-0.03, 1.03)
    return fig


def plot_filters(run, claimed: set[str]):
    by_filter: dict[str, list[str]] = {}
    for key in run.series:
        parts = key.split("/")
        if parts[0] == "filter" and len(parts) == 3:
            by_filter.setdefault(parts[1], []).append(key)
    # Difficulty last: it runs after rollout, the text filters before it.
    names = sorted(by_filter, key=lambda n: (n == "difficulty", n))
    panels = []
    for name in names:
        keys = sorted(by_filter[name], key=lambda k: (k.split("/")[2] not in ("passed", "kept"), k))
        claimed.update(keys)
        title = f"{name} filter" + (" (after rollout)" if name == "difficulty" else "")
        panels.append((title, "problems per step", [(k.split("/")[2].replace("_", " "), run.series[k]) for k in keys]))
    fig = panels_plot("Kept and filtered problems, per filter", panels, cols=2 if len(panels) > 2 else 1)
    for ax in fig.axes if fig is not None else []:
        ax.set_ylim(bottom=0)  # counts: a zero baseline keeps proportions honest
    return fig


def plot_pool(run, claimed: set[str]):
    s = run.series
    panels: list[tuple] = []
    if "pool/size" in s:
        # A running total: averaging would only blur it.
        panels.append(("Prompt pool size", "problems in pool", [("pool size", s["pool/size"])], False))
    flow = [(k.split("/")[1], s[k]) for k in ("pool/generated", "pool/kept") if k in s]
    if flow:
        panels.append(("Generated and kept per step", "problems per step", flow))
    claimed.update(("pool/size", "pool/generated", "pool/kept"))
    fig = panels_plot("Prompt pool", panels)
    return fig


def _namespace_plot(title: str, ns: str, ylabel: str, run, claimed: set[str], one_panel: bool):
    keys = sorted(
        (k for k in run.series if k.startswith(ns + "/") and k not in claimed),
        key=lambda k: (k != f"{ns}/policy" and k != f"{ns}/mean", k),
    )
    if not keys:
        return None
    claimed.update(keys)
    if one_panel:
        panels = [(title, ylabel, [(short_key(k), run.series[k]) for k in keys])]
    else:  # separate panels: the keys have different scales (e.g. policy loss vs KL loss)
        panels = [(k, ylabel, [(short_key(k), run.series[k])]) for k in keys]
    return panels_plot(title, panels, cols=2 if len(panels) > 2 else 1)


def plot_kl(run, claimed):
    return _namespace_plot("KL divergence to the reference policy", "kl", "KL (nats/token)", run, claimed, True)


def plot_entropy(run, claimed):
    if "actor/entropy" not in run.series:
        return None
    claimed.add("actor/entropy")
    return panels_plot(
        "Policy entropy",
        [("Mean token entropy of sampled responses", "entropy (nats)", [("entropy", run.series["actor/entropy"])])],
    )


def plot_loss(run, claimed):
    return _namespace_plot("Training loss", "loss", "loss", run, claimed, False)


def plot_length(run, claimed):
    return _namespace_plot("Response length", "response", "tokens", run, claimed, True)


STAGES = ("instruct", "generate", "reward", "filter", "learner", "sync")


def plot_time(run, claimed: set[str]):
    s = run.series
    stages = [k for k in (f"time/{x}" for x in STAGES) if k in s]
    stages += sorted(k for k in s if k.startswith("time/") and k not in stages and k != "time/step")
    if not stages and "time/step" not in s:
        return None
    claimed.update(stages + ["time/step"])
    fig, (ax,) = _new_figure(1, height=4.2)
    # Only steps that timed something: an evaluation-only row (step 0) is not a 0 s step.
    timed = {st for k in stages for st in s[k].steps}
    steps = [st for st in run.steps if st in timed] or run.steps
    if stages:
        ys = []
        for key in stages:
            got = dict(zip(s[key].steps, s[key].values))
            ys.append([got.get(st, 0.0) if math.isfinite(got.get(st, 0.0)) else 0.0 for st in steps])
        total = sum(sum(y) for y in ys) or 1.0
        labels = [f"{short_key(k)}: {sum(y) / len(y):.1f} s ({100 * sum(y) / total:.0f}%)" for k, y in zip(stages, ys)]
        ax.stackplot(steps, ys, labels=labels, alpha=0.85)
    if "time/step" in s:
        st, vals = s["time/step"].finite()
        mean = sum(vals) / len(vals) if vals else math.nan
        ax.plot(st, vals, color="black", linewidth=1.5, linestyle="--", label=f"whole step: {mean:.1f} s")
    _style(ax, "Seconds per step, by stage (stacked; legend: mean per step)", "seconds")
    ax.title.set(fontsize=14, fontweight="bold")
    ax.set_ylim(bottom=0)
    handles, labels = ax.get_legend_handles_labels()
    # Legend outside the plot: stacked areas fill the axes.
    ax.legend(handles[::-1], labels[::-1], fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def plot_eval(run, claimed: set[str]):
    benches: dict[str, list[str]] = {}
    for key in run.series:
        parts = key.split("/")
        if parts[0] == "eval":
            bench = parts[1] if len(parts) > 2 else "eval"
            benches.setdefault(bench, []).append(key)
    panels = []
    for bench in sorted(benches):
        keys = sorted(benches[bench])
        claimed.update(keys)
        panels.append((bench, "score", [(k.split("/")[-1], run.series[k]) for k in keys]))
    # Evaluations are sparse and each point matters: no smoothing.
    return panels_plot("Evaluation", panels, cols=2 if len(panels) > 2 else 1, smooth=False)


def plot_guard(run, claimed: set[str]):
    """The collapse guard (serl.run.guard): the deciding probe score with its best, and the
    label-free signals it logs beside it (which do not decide)."""
    s = run.series
    keys = [k for k in s if k.startswith("guard/")]
    if not keys:
        return None
    claimed.update(keys)
    score = [
        (k.split("/")[1].replace("_", " "), s[k])
        for k in ("guard/agreement", "guard/label_acc", "guard/best")
        if k in s
    ]
    side = [
        (k.split("/")[1].replace("_", " "), s[k])
        for k in ("guard/vote_agreement", "guard/too_easy_share", "guard/entropy", "guard/probe_cut", "guard/flip_rate")
        if k in s
    ]
    acts = [
        (k.split("/")[1].replace("_", " "), s[k]) for k in ("guard/fired", "guard/action", "guard/rollbacks") if k in s
    ]
    return panels_plot(
        "Collapse guard",
        [
            ("Probe score (decides)", "share of probe", score, False),
            ("Label-free signals (logged, do not decide)", "value", side, False),
            ("Decisions (action: 1 watch, 2 stop, 3 rollback)", "value", acts, False),
        ],
        cols=1,
    )


# (file stem, builder); each builder claims the keys it drew so leftovers get a generic plot.
PLOTS: list[tuple[str, Callable]] = [
    ("reward", plot_reward),
    ("filters", plot_filters),
    ("pool", plot_pool),
    ("kl", plot_kl),
    ("entropy", plot_entropy),
    ("loss", plot_loss),
    ("response_length", plot_length),
    ("time", plot_time),
    ("eval", plot_eval),
    ("guard", plot_guard),
]
MAX_PANELS = 12


def plot_leftovers(run, claimed: set[str]) -> list[tuple[str, Any]]:
    """Keys no specific plot drew: one figure per namespace, a panel per key."""
    by_ns: dict[str, list[str]] = {}
    for key in run.series:
        if key not in claimed:
            by_ns.setdefault(key.split("/")[0] if "/" in key else "misc", []).append(key)
    out = []
    for ns in sorted(by_ns):
        keys = sorted(by_ns[ns])
        for part, start in enumerate(range(0, len(keys), MAX_PANELS)):
            chunk = keys[start : start + MAX_PANELS]
            panels = [(k, short_key(k).replace("_", " "), [(short_key(k), run.series[k])]) for k in chunk]
            fig = panels_plot(f"Other '{ns}' metrics", panels, cols=2 if len(panels) > 1 else 1)
            if fig is not None:
                out.append((f"other_{file_stem(ns)}" + (f"_{part + 1}" if len(keys) > MAX_PANELS else ""), fig))
    return out
