"""What a run changed, told honestly: the end-of-run summary the runner prints and
``serl report`` puts in summary.md.

Two rules live here and nowhere else:

- ``direction(key)``: whether a higher or a lower value of a metric is better, or
  neither (a count, a size, a loss whose value means nothing on its own). A metric with
  no better direction is said to have "changed", never to have improved or got worse.
- A held-out score is a sample of problems: the change between the first and the last
  evaluation is given with its 95% interval, paired over the same problems when the
  evaluation kept per-problem results (``eval_items.jsonl``), and called "not
  significant" when that interval contains 0. Each single score gets its Wilson interval.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

ITEMS_FILE = "eval_items.jsonl"  # per-problem evaluation results, one line per evaluation
RECORDS_FILE = "eval_records.jsonl"  # one line per generation of an evaluation: its text, answer, verdict

# Exact keys first: the ones a suffix rule below would get wrong.
_EXACT = {
    # The policy-gradient surrogate is about 0 by construction (advantages are centred):
    # its value says nothing about how well the policy does. The KL terms are a leash,
    # not a goal. Entropy and lengths have no better direction either.
    "loss/policy": 0,
    "loss/kl": 0,
    "kl/mean": 0,
    "actor/entropy": 0,
    "actor/approx_kl": 0,
    "actor/clip_frac": 0,
    "actor/grad_norm": 0,
    "actor/lr": 0,
    "response/length_mean": 0,
    "reward/clusters": 0,
    "pool/size": 0,
    "pool/kept": 0,
    "pool/generated": 0,
    "filter/difficulty/kept": +1,
    "reward/no_answer_frac": -1,
    "response/truncated_frac": -1,
    "spin/real_logp": +1,
    "dpo/margin": +1,
}
# Then by the last part of the key (after the last "/").
_HIGHER_NAMES = {
    "mean",
    "agreement",
    "majority_agreement",
    "accuracy",
    "win_rate",
    "payoff",
    "strict",
    "lenient",
    "valid_json",
    "informative",
    "verifier_lift",
    "reward_mean",
    "accept_rate",
}
_HIGHER_PREFIXES = ("pass@", "maj@", "mean@")
_LOWER_PARTS = ("invalid", "bad_", "no_answer", "exploitability", "too_long", "repeated")


def direction(key: str) -> int:
    """+1 when a higher value of ``key`` is better, -1 when lower is better, 0 when neither."""
    if key in _EXACT:
        return _EXACT[key]
    head, _, name = key.rpartition("/")
    if key.startswith("time/"):
        return -1  # seconds: faster is better
    if key.startswith("loss/") or name.endswith("loss"):
        return -1
    if name.endswith(("_lo", "_hi")):  # an interval's end, not a score of its own
        return 0
    if any(part in name for part in _LOWER_PARTS):
        return -1
    if name.startswith(_HIGHER_PREFIXES) or name in _HIGHER_NAMES:
        # "mean" alone is a score only under a score namespace (reward/mean, not length/mean)
        return +1 if name != "mean" or head.split("/")[0] in ("reward", "eval") else 0
    return 0


def verdict(key: str, before: float, after: float) -> str:
    """ "improved" / "got worse" by ``direction(key)``; "changed" where no direction is better."""
    if after == before:
        return "unchanged"
    sign = direction(key)
    if sign == 0:
        return "changed"
    better = (after - before) * sign > 0
    if key.startswith("time/"):
        return "improved (faster)" if better else "got worse (slower)"
    return "improved" if better else "got worse"


# -- per-problem evaluation results --------------------------------------------------------


def save_items(run_dir: str | Path, step: int, items: dict[str, dict]) -> None:
    """Append one evaluation's per-problem results (metric key -> {"ids", "values"})."""
    if not items:
        return
    with open(Path(run_dir) / ITEMS_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps({"step": step, "items": items}) + "\n")


def save_records(run_dir: str | Path, step: int, records: list[dict]) -> None:
    """Append one evaluation's generations (response text, answer, verdict, finish reason), so a
    published number can be re-read and split into format, stopping and correctness later."""
    if not records:
        return
    with open(Path(run_dir) / RECORDS_FILE, "a", encoding="utf-8") as f:
        f.writelines(json.dumps({"step": step, **r}) + "\n" for r in records)


def read_items(run_dir: str | Path) -> dict[int, dict[str, dict]]:
    """step -> that step's per-problem results; a later line for a step wins (a resume that
    evaluated the step again), and a torn or foreign line is skipped: this is a summary."""
    path = Path(run_dir) / ITEMS_FILE
    out: dict[int, dict[str, dict]] = {}
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
            out[int(row["step"])] = dict(row["items"])
        except (ValueError, KeyError, TypeError):
            continue
    return out


def _binary(values: list) -> bool:
    return all(v in (0, 1) for v in values)


def score_interval(values: list[float]) -> tuple[float, float]:
    """95% interval of a mean score: Wilson for 0/1 outcomes, a bootstrap otherwise."""
    from serl.eval.stats import paired_bootstrap, wilson  # serl.eval pulls in torch: only when needed

    if _binary(values):
        return wilson(sum(values), len(values))
    _, lo, hi = paired_bootstrap([0.0] * len(values), list(values))
    return lo, hi


def paired_change(before: dict, after: dict) -> dict | None:
    """The change of one metric between two evaluations, over the problems both have."""
    from serl.eval.stats import paired_bootstrap, paired_diff_ci

    b = dict(zip(before.get("ids", []), before.get("values", [])))
    a = dict(zip(after.get("ids", []), after.get("values", [])))
    common = [i for i in b if i in a]
    if not common:
        return None
    xs, ys = [b[i] for i in common], [a[i] for i in common]
    if _binary(xs) and _binary(ys):
        d, lo, hi = paired_diff_ci([int(x) for x in xs], [int(y) for y in ys])
    else:
        d, lo, hi = paired_bootstrap(xs, ys)
    return {
        "n": len(common),
        "diff": d,
        "lo": lo,
        "hi": hi,
        "better": sum(1 for x, y in zip(xs, ys) if y > x),
        "worse": sum(1 for x, y in zip(xs, ys) if y < x),
        "before": xs,
        "after": ys,
    }


def significance(key: str, change: dict) -> str:
    """Plain words for a change with its interval."""
    lo, hi = change["lo"], change["hi"]
    if lo <= 0 <= hi:
        return "not significant: the interval contains 0"
    up = lo > 0
    if direction(key) == 0:
        return "changed (the interval excludes 0)"
    return ("improved" if up == (direction(key) > 0) else "got worse") + " (the interval excludes 0)"


# -- the summary -----------------------------------------------------------------------------

TRAIN_KEYS = ("reward/mean", "reward/agreement", "train/batch_prompts", "pool/size")


def _num(v: float) -> str:
    if not math.isfinite(v):
        return "n/a"
    return str(int(v)) if v == int(v) and abs(v) < 1e9 else f"{v:.3f}"


def _first_last(series) -> tuple[tuple[int, float], tuple[int, float]] | None:
    steps, values = series.finite()
    if not steps:
        return None
    return (steps[0], values[0]), (steps[-1], values[-1])


def _eval_keys(series: dict) -> list[str]:
    keys = [k for k in series if k.startswith("eval/") and not k.endswith(("_lo", "_hi"))]
    return sorted(keys) + (["time/eval"] if "time/eval" in series else [])


def change_lines(run_dir: str | Path) -> list[str]:
    """The summary of what changed over the run in ``run_dir``, as lines of text."""
    from serl.report.metrics import METRICS_FILE
    from serl.report.run_metrics import read_metrics

    series, _, _ = read_metrics(Path(run_dir) / METRICS_FILE)
    lines = []
    train = [(k, fl) for k in TRAIN_KEYS if k in series and (fl := _first_last(series[k]))]
    if train:
        lines.append("training, first step -> last step:")
        for key, ((_, a), (_, b)) in train:
            lines.append(f"  {key:24s} {_num(a)}  ->  {_num(b)}  {verdict(key, a, b)}")
    evals = [(k, fl) for k in _eval_keys(series) if (fl := _first_last(series[k])) and fl[0][0] != fl[1][0]]
    if evals:
        items = read_items(run_dir)
        lines.append("evaluation, first -> last (95% intervals):")
        for key, ((s0, a), (s1, b)) in evals:
            lines += _eval_lines(key, s0, a, s1, b, items.get(s0, {}).get(key), items.get(s1, {}).get(key))
    return lines + describe(series)


def _eval_lines(key: str, s0: int, a: float, s1: int, b: float, first: dict | None, last: dict | None) -> list[str]:
    if key.startswith("time/"):
        return [f"  {key:24s} step {s0}: {a:.1f} s  ->  step {s1}: {b:.1f} s  {verdict(key, a, b)}"]
    change = paired_change(first, last) if first and last else None
    if change is None:
        return [
            f"  {key:24s} step {s0}: {_num(a)}  ->  step {s1}: {_num(b)}  {verdict(key, a, b)} "
            f"(no per-problem results kept: no interval; a small evaluation set is noisy)"
        ]

    def score(vals: list[float]) -> str:
        lo, hi = score_interval(vals)
        return f"{sum(vals) / len(vals):.3f} [{lo:.3f}, {hi:.3f}]"

    n, d = change["n"], change["diff"]
    counted = (
        f"{change['better']} better, {change['worse']} worse"
        if _binary(change["before"] + change["after"])
        else f"{change['better']} up, {change['worse']} down"
    )
    return [
        f"  {key:24s} step {s0}: {score(change['before'])}  ->  step {s1}: {score(change['after'])}",
        f"  {'':24s} change {d:+.3f} [{change['lo']:+.3f}, {change['hi']:+.3f}] on the same {n} problems ({counted})",
        f"  {'':24s} {significance(key, change)}",
    ]


def print_summary(
    run_dir: str | Path, secs: float, print_=print, notes: tuple[str | None, ...] = (), report: bool = True
) -> None:
    """The runner's last words: what changed (and ``notes``: the kept best policy), and where the details are."""
    run_dir = Path(run_dir)
    print_(f"\nrun finished in {secs:.0f} s: {run_dir}")
    try:
        lines = change_lines(run_dir)
    except Exception as e:  # a summary problem must not hide a finished run
        lines = [f"(no summary: {e})"]
    for line in lines + [x for x in notes if x]:
        print_(f"  {line}")
    where = run_dir / "report" if report else f"not drawn (--report false); `serl report {run_dir}` draws it"
    print_(f"  metrics: {run_dir / 'metrics.jsonl'}   report: {where}")


def describe(series: dict) -> list[str]:
    """Lines on the guard's decisions from a run's metrics (``serl.report.run_metrics.read_metrics``
    series); none when the guard was off."""
    if "guard/best" not in series:
        return []
    rows: dict[int, dict] = {}
    for key in [k for k in series if k.startswith("guard/")]:
        for step, v in zip(series[key].steps, series[key].values):
            rows.setdefault(step, {})[key] = v
    checks = [(s, r) for s, r in sorted(rows.items()) if "guard/best" in r]
    labelled = bool(checks[-1][1].get("guard/labelled"))
    key, what = ("guard/label_acc", "labelled probe accuracy") if labelled else ("guard/agreement", "agreement")
    names = {1: "would stop here (watch mode)", 2: "stopped the run", 3: "rolled back"}
    lines = []
    for step, r in checks:
        if r.get("guard/action"):
            kept = int(r["guard/best_step"])
            lines.append(
                f"collapse guard: fired at step {step} ({what} {r[key]:.2f}, best {r['guard/best']:.2f} "
                f"at step {kept}); {names[int(r['guard/action'])]}; kept step {kept}"
            )
    if not lines:
        step, r = checks[-1]
        lines.append(
            f"collapse guard: did not fire in {len(checks)} checks ({what} {r[key]:.2f} at step {step}, "
            f"best {r['guard/best']:.2f} at step {int(r['guard/best_step'])})"
        )
    spent = sum(r.get("guard/probe_s", 0.0) for _, r in checks)
    lines.append(f"collapse guard: {spent:.0f} s on probe checks (outside --max_minutes)")
    return lines
