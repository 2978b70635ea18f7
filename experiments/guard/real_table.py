"""real_runs.md from items/<run>/ alone (the standard library and serl's pure-Python rule code).

Every run folder in items/ with a metrics.jsonl is tabled (collapse and improving first, then the
others by name, e.g. improving_p256, collapse_p256_s7). Per run and per guard check: the held-out truth (pass@1, answers cut at the limit, boxed answers,
accuracy among finished answers) beside each candidate signal. Then, per signal, the step at which
its alarm (fixed before the runs, README "The signals' alarms") first sounds, against the step
at which held-out pass@1 first fell more than 5 points below its best so far (the collapse).
The anchor agreement's alarm is read from the run's own log (the guard with the run's settings,
``items/<run>/flags.json``) and replayed from the kept per-item outcomes under three rules over the
run's planned checks: the default (margin 0.10, spent, patience 2), no margin (margin 0, spent,
patience 2: the test alone decides; ``candidates.py``) and the old one (per check at 0.05,
patience 1).
"""

from __future__ import annotations

import json
import re
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
FIRST = ("collapse", "improving")  # then the other runs in items/, by name
OWN = "anchor agreement, the run's own guard (logged)"
DEFAULT = "anchor agreement, default rule (margin 0.10, spent, patience 2)"
NO_MARGIN = "anchor agreement, no margin (margin 0, spent, patience 2)"
OLD = "anchor agreement, the old rule (per check, patience 1)"
# not a candidate (candidates.py: 29 % false alarms per run); shown because the second collapse asked
PATIENCE1 = "anchor agreement, no margin, patience 1 (spent)"
GUARD_DEFAULTS = {
    "guard_margin": 0.10,
    "guard_patience": 2,
    "guard_alpha": 0.05,
    "guard_rule": "spent",
    "guard_checks": 0,
}


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


def replay(checks: list[dict], rule: Rule) -> tuple[int | None, int | None]:
    """The step of the first firing of ``rule`` on the kept per-check outcomes (None: never) and
    the check it keeps (the best so far)."""
    st = GuardState()
    for c in checks:
        items = c["items"]
        if judge(st, rule, c["step"], sum(items) / len(items), items) == "fire":
            return c["step"], st.best_step
    return None, None


def run_names(items: Path) -> list[str]:
    """The run folders in items/ (those with a metrics.jsonl): collapse, improving, then the rest by name."""
    found = sorted(p.name for p in items.iterdir() if (p / "metrics.jsonl").is_file()) if items.is_dir() else []
    return [n for n in FIRST if n in found] + [n for n in found if n not in FIRST]


def _value(x: str):
    for kind in (int, float):
        try:
            return kind(x)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(x.lower(), x)


def settings(name: str, run: Path) -> dict:
    """The run's options from items/<run>/flags.json: the config (a dict) or the command's flags (a
    list; ``--resume DIR`` alone says nothing, and the name's ``_p<N>`` then means real_runs.py's
    ``--probe N``: margin 0). Unset guard options are serl's defaults."""
    flags = json.loads((run / "flags.json").read_text()) if (run / "flags.json").is_file() else {}
    if isinstance(flags, list):
        pairs = {}
        for i, x in enumerate(flags):
            if isinstance(x, str) and x.startswith("--"):
                nxt = flags[i + 1] if i + 1 < len(flags) else "true"
                pairs[x[2:]] = _value(nxt) if isinstance(nxt, str) and not nxt.startswith("--") else True
        flags = pairs
    out = {
        **GUARD_DEFAULTS,
        **{
            k: v
            for k, v in flags.items()
            if k in GUARD_DEFAULTS or k in ("steps", "guard_every", "seed", "guard_probe_data", "guard_probe")
        },
    }
    probe = re.search(r"_p(\d+)", name)
    if probe and "guard_margin" not in flags and int(probe.group(1)) != 64:
        out["guard_margin"] = 0.0  # real_runs.py --probe N (N != 64) sets --guard_margin 0
    return out


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
    cfg = settings(name, run)
    every = cfg.get("guard_every") or (steps[1] - steps[0] if len(steps) > 1 else 1)
    level = next((m["guard/level"] for m in metrics.values() if "guard/level" in m), None)
    if cfg["guard_checks"]:
        n = int(cfg["guard_checks"])
    elif cfg.get("steps"):
        n = planned_checks(int(cfg["steps"]), int(every))
    elif level and cfg["guard_rule"] == "spent":
        n = round(cfg["guard_alpha"] / level)
    else:
        n = planned_checks(max(steps or [0]), int(every))
    probe_n = len(checks[0]["items"]) if checks else cfg.get("guard_probe")
    src = cfg.get("guard_probe_data") or "the training prompts"
    out = [f"### {name}", ""]
    out.append(
        f"Probe {probe_n} items from {Path(str(src)).name if src != 'the training prompts' else src}; the run's guard: "
        f"margin {cfg['guard_margin']:g}, {cfg['guard_rule']} at alpha {cfg['guard_alpha']:g} over {n} planned checks, "
        f"patience {cfg['guard_patience']}; seed {cfg.get('seed', '?')}; {len(steps)} checks logged (steps "
        f"{steps[0] if steps else ''}-{steps[-1] if steps else ''})."
    )
    out.append("")
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
    flips = [metrics.get(s, {}).get("guard/flip_rate") for s in steps]
    votes = [metrics.get(s, {}).get("guard/vote_agreement_mean") for s in steps]
    ents = [metrics.get(s, {}).get("guard/entropy_mean") for s in steps]
    first_ent = next((x for x in ents if x is not None), None)
    own = Rule(
        margin=float(cfg["guard_margin"]),
        patience=int(cfg["guard_patience"]),
        alpha=float(cfg["guard_alpha"]),
        rule=str(cfg["guard_rule"]),
        checks=n,
    )
    logged = next((s for s in sorted(metrics) if metrics[s].get("guard/action")), None)
    replays = {
        OWN: replay(checks, own),
        DEFAULT: replay(checks, Rule(checks=n)),
        NO_MARGIN: replay(checks, Rule(margin=0.0, checks=n)),
        OLD: replay(checks, Rule(rule="per_check", patience=1, checks=n)),
        PATIENCE1: replay(checks, Rule(margin=0.0, patience=1, checks=n)),
    }
    alarms = {
        OWN: logged,
        DEFAULT: replays[DEFAULT][0],
        NO_MARGIN: replays[NO_MARGIN][0],
        OLD: replays[OLD][0],
        PATIENCE1: replays[PATIENCE1][0],
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
    if replays[OWN][0] != logged:  # the replay must decide as the run did
        out += ["", f"**The replay of the run's own rule fires at {replays[OWN][0]}, the log at {logged}.**"]
    kept = replays[OWN][1]
    if kept is not None and kept in ev and 0 in ev:
        d, lo, hi = paired_diff_ci(ev[0]["values"], ev[kept]["values"])
        best = ev[best_s]["pass"]
        out += [
            "",
            f"Kept policy (what `stop` with the run's own guard ends with): step {kept}, held-out {ev[kept]['pass']:.3f}, "
            f"{(best - ev[kept]['pass']) * 100:.1f} points below the run's best; against step 0: "
            f"{d * 100:+.1f} [{lo * 100:+.1f}, {hi * 100:+.1f}] (paired, 95%).",
        ]
    return out + [""]


def write_table(items: Path, dest: Path) -> str:
    parts = ["# The guard on the real runs (generated by `real_runs.py --table` or `real_table.py` from items/)", ""]
    for name in run_names(items):
        parts += run_table(name, items / name)
    text = "\n".join(parts)
    dest.write_text(text + "\n")
    return text


def plot(items: Path, dest: Path) -> None:
    """real_runs.png: held-out pass@1 and the anchor agreement per check, the firing marked (matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = run_names(items)
    cols = min(3, len(names))
    rows_n = -(-len(names) // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(5.5 * cols, 3.8 * rows_n), squeeze=False)
    for ax in axes.flat[len(names) :]:
        ax.set_visible(False)
    for ax, name in zip(axes.flat, names):
        run = items / name
        ev, metrics = heldout(run), merged_per_step(rows(run / "metrics.jsonl"))
        checks = sorted(s for s, m in metrics.items() if "guard/agreement" in m)
        ax.plot(sorted(ev), [ev[s]["pass"] for s in sorted(ev)], "o-", label="held-out pass@1 (200)")
        probe_n = next((metrics[s].get("guard/probe_n") for s in checks), "?")
        ax.plot(
            checks, [metrics[s]["guard/agreement"] for s in checks], "s--", label=f"anchor agreement (probe {probe_n})"
        )
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
