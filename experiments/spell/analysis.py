"""The analysis of a SPELL run (run.py) and of the stronger plan's arms (stronger.py): the held-out
scores before and after, with Wilson intervals and paired-bootstrap changes (serl.eval.stats),
the table and the per-step curves."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's serl

from serl.eval.stats import paired_bootstrap, wilson  # noqa: E402

CURVES = ["questioner/valid_json", "questioner/bad_ground", "questioner/informative", "responder/accuracy",
          "verifier/agreement", "verifier/bad_format", "questioner/reward_mean", "responder/reward_mean"]


def paired(before: list[float], after: list[float]) -> dict:
    """Mean per-item change with its 95% paired-bootstrap interval (serl.eval.stats)."""
    diff, lo, hi = paired_bootstrap(before, after)
    return {"diff": diff, "ci": [lo, hi], "n": len(before)}


def rate(values: list[float]) -> dict:
    n = len(values)
    k = sum(values)
    lo, hi = wilson(k, n)
    return {"rate": k / n if n else math.nan, "ci": [lo, hi], "n": n}


def read_records(path: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {"responder": [], "verifier": [], "questioner": []}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        out[r["role"]].append(r)
    return out


def analyse(run: Path, out: Path) -> dict:
    steps = sorted(int(p.stem.split("_")[1]) for p in (run / "spell_eval").glob("step_*.jsonl"))
    if len(steps) < 2:
        raise SystemExit(f"{run}: need evaluations before and after training, found steps {steps}")
    first, last = steps[0], steps[-1]
    before, after = (read_records(run / "spell_eval" / f"step_{s}.jsonl") for s in (first, last))
    evals = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["step"] in (first, last):
            evals.setdefault(rec["step"], {}).update({k: v for k, v in rec.items() if k.startswith("eval/")})
    res: dict = {"steps": [first, last], "metrics": evals}
    for name, key in (("strict", "strict"), ("lenient", "lenient")):
        b = [r[key] for r in before["responder"]]
        a = [r[key] for r in after["responder"]]
        res[f"responder_{name}"] = {"before": rate(b), "after": rate(a), "change": paired(b, a)}
    for name, fn in (("accuracy", lambda r: float(r["judgment"] == r["label"])),
                     ("bad_format", lambda r: float(r["judgment"] == -1))):
        b, a = [fn(r) for r in before["verifier"]], [fn(r) for r in after["verifier"]]
        res[f"verifier_{name}"] = {"before": rate(b), "after": rate(a), "change": paired(b, a)}
    for name in ("valid_json", "bad_ground"):
        key = f"eval/questioner/{name}"
        res[f"questioner_{name}"] = {"before": evals.get(first, {}).get(key), "after": evals.get(last, {}).get(key)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=1))
    (out / "results.md").write_text(table(res))
    plot(run, out / "curves.png")
    return res


def _fmt(r: dict) -> str:
    return f"{r['rate']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] (n={r['n']})"


def table(res: dict) -> str:
    first, last = res["steps"]
    rows = [f"| measure | step {first} | step {last} | change [95% CI] |", "|---|---|---|---|"]
    for key in ("responder_strict", "responder_lenient", "verifier_accuracy", "verifier_bad_format"):
        r = res[key]
        c = r["change"]
        rows.append(f"| {key.replace('_', ' ', 1)} | {_fmt(r['before'])} | {_fmt(r['after'])} | "
                    f"{c['diff']:+.3f} [{c['ci'][0]:+.3f}, {c['ci'][1]:+.3f}] |")
    for key in ("questioner_valid_json", "questioner_bad_ground"):
        r = res[key]
        show = (lambda v: "n/a" if v is None else f"{v:.3f}")
        rows.append(f"| {key.replace('_', ' ', 1)} | {show(r['before'])} | {show(r['after'])} | |")
    return "\n".join(rows) + "\n"


def plot(run: Path, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[tuple[int, float]]] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        for k in CURVES:
            if isinstance(rec.get(k), (int, float)):
                series.setdefault(k, []).append((rec["step"], rec[k]))
    fig, axes = plt.subplots(2, 4, figsize=(16, 6.5), squeeze=False)
    for ax, key in zip(axes.flat, CURVES):
        pts = series.get(key, [])
        ax.plot([s for s, _ in pts], [v for _, v in pts], marker="o")
        ax.set_title(key, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    import yaml

    cfg = run / "config.yaml"
    model = (yaml.safe_load(cfg.read_text()) or {}).get("model") if cfg.is_file() else None
    name = "SmolLM2-135M-Instruct" if model in (None, "", "smollm2") else Path(str(model)).name
    fig.suptitle(f"SPELL on {name}: per-step role metrics ({run.name})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
