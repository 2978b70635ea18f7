"""SPELL on the embedded model: train, then compare the held-out scores before and after.

One command reproduces the measurement of experiments/spell/README.md:

    python experiments/spell/run.py                 # ~10 steps of 8 clusters, compact prompts
    python experiments/spell/run.py --resume        # continue an interrupted run, then analyse
    python experiments/spell/run.py --smoke         # tiny sizes: checks the pipeline in minutes

It runs ``serl train --recipe spell`` (held-out evaluation before and after: all 120 gold
questions, all 240 verifier items, 20 questioner clusters; greedy), then writes into the
output folder ``results.json``, ``results.md`` (the table, with 95% confidence intervals)
and ``curves.png`` (per-step role metrics), next to the run directory ``run/``.

Confidence intervals: Wilson score intervals for each rate; for a before/after change on
the same items, the paired difference's mean with a 95% paired-bootstrap interval
(10,000 resamples of the items; serl.eval.stats).
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's serl

from serl.eval.stats import paired_bootstrap, wilson  # noqa: E402

# the bootstrap (probe_json.py, probe_verifier.py, README): the questioner's reply starts with
# '{"question": "' and it samples at 0.7; the verifier's reply starts with '[['; the
# one-example bootstrap is off (the model copies it)
BOOTSTRAP = ["--compact_prompts", "true", "--questioner_prefill", "on", "--questioner_temperature", "0.7",
             "--few_shot_questioner", "false", "--verifier_prefill", "on"]
FULL = ["--steps", "10", "--rollout_batch_size", "8", "--n_samples_per_prompt", "8", "--verifier_samples", "3",
        "--grounding_samples", "4", "--max_refill_rounds", "2", *BOOTSTRAP,
        "--questioner_max_len", "96", "--generate_max_len", "96", "--verifier_max_len", "48",
        "--prompt_max_len", "1024", "--actor_learning_rate", "2e-6", "--temperature", "1.0", "--bf16", "true",
        "--eval_qa_limit", "0", "--eval_verify_limit", "0", "--eval_questioner_limit", "20"]
SMOKE = ["--steps", "2", "--rollout_batch_size", "2", "--n_samples_per_prompt", "2", "--verifier_samples", "2",
         "--grounding_samples", "1", "--max_refill_rounds", "1", *BOOTSTRAP, "--questioner_max_len", "48",
         "--generate_max_len", "48", "--verifier_max_len", "24", "--prompt_max_len", "1024",
         "--eval_qa_limit", "8", "--eval_verify_limit", "8", "--eval_questioner_limit", "2"]
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


def main_stronger(args, extra: list[str]) -> int:
    """Issue 33's plan (stronger.py): probes, then the arms, then the comparison across arms."""
    import time

    import stronger

    out = Path(args.out)
    if out.exists() and any(out.iterdir()) and not args.resume:
        raise SystemExit(f"{out} exists: use --resume, or another --out")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    decision = stronger.probes(args, out)
    stronger.log(f"probe decision: {json.dumps(decision)}")
    flags = [*(stronger.SMOKE if args.smoke else stronger.FULL), *stronger.LORA,
             "--questioner_prefill", decision["questioner_prefill"], "--verifier_prefill", decision["verifier_prefill"]]
    model = args.model
    if not decision["calibrated"] and not args.no_warmup:  # the first stage issue 33 names: warm the verifier up
        model = stronger.warm_up(args, out, flags + extra, decision)
        stronger.log(f"after the warm-up: {json.dumps(decision['after_warmup'])}")
    ready = decision["after_warmup"]["calibrated"] if "after_warmup" in decision else decision["calibrated"]
    if not ready and not args.allow_uncalibrated:
        raise SystemExit("the verifier is not calibrated on the probe items" + (" after the warm-up" if
                         "after_warmup" in decision else "") + " (calibration above); rerun with --resume "
                         "--allow_uncalibrated to train the recipe as it is, and report that it started uncalibrated.")
    settings = {"model": args.model, "smoke": args.smoke, "generator": args.generator, "arms": args.arms,
                "decision": decision, "extra": extra, "allow_uncalibrated": args.allow_uncalibrated,
                "no_warmup": args.no_warmup, "start_model": model}
    setup = out / "setup.json"
    if setup.exists():
        saved = json.loads(setup.read_text())["settings"]
        diff = {k: (saved.get(k), v) for k, v in settings.items() if saved.get(k) != v and k != "allow_uncalibrated"}
        if diff:
            raise SystemExit(f"{setup}: settings differ from this command's: {diff}; use another --out")
    else:
        setup.write_text(json.dumps({"settings": settings, "date": time.strftime("%Y-%m-%d %H:%M %Z")}, indent=1))
    for arm in args.arms:
        if stronger.ARMS[arm] is not None:  # no training: the step-0 evaluation
            stronger.train(out, arm, ["--recipe", "spell", "--model", model, "--generator", args.generator,
                                      "--progress", "plain", *flags, *stronger.ARMS[arm], *extra])
    print(stronger.report(args, out, args.arms, decision))
    if args.export:
        for p in stronger.export(out, Path(args.export)):
            print(p)
    stronger.log(f"done in {(time.time() - t0) / 60:.1f} min: {out / 'results_stronger.md'}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="SPELL before/after on the embedded model")
    ap.add_argument("--model", default="smollm2", help="smollm2 (the embedded model: the measured round) or an "
                    "opt-in one such as qwen2.5-coder-0.5b (the stronger plan)")
    ap.add_argument("--plan", default="auto", choices=("auto", "round1", "stronger"),
                    help="auto: round1 for smollm2, stronger otherwise (stronger.py: probes, LoRA, three arms)")
    ap.add_argument("--arms", default="full,frozen_verifier,no_training", help="stronger plan: arms to run")
    ap.add_argument("--allow_uncalibrated", action="store_true",
                    help="stronger plan: train even if the probe finds the untrained verifier uncalibrated")
    ap.add_argument("--no_warmup", action="store_true",
                    help="stronger plan: no verifier warm-up even if the probe finds the verifier uncalibrated")
    ap.add_argument("--export", default="", help="stronger plan: copy per-item results (no text) to this folder")
    ap.add_argument("--out", default=str(ROOT / "runs/spell_experiment"), help="output folder (the run and its analysis)")
    ap.add_argument("--resume", action="store_true", help="continue OUT/run, then analyse")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: check the pipeline only")
    ap.add_argument("--generator", default="auto", help="auto (vLLM when installed), vllm or hf")
    ap.add_argument("--analyse_only", action="store_true", help="only (re)write the tables and curves")
    args, extra = ap.parse_known_args(argv)
    if args.plan == "stronger" or (args.plan == "auto" and args.model != "smollm2"):
        import stronger

        args.arms = [x.strip() for x in args.arms.split(",") if x.strip()]
        if not args.arms or set(args.arms) - set(stronger.ARMS) or all(stronger.ARMS[x] is None for x in args.arms):
            raise SystemExit(f"--arms: a training arm and any of {', '.join(stronger.ARMS)}")
        if args.out == str(ROOT / "runs/spell_experiment"):
            args.out = str(ROOT / f"runs/spell_{args.model}")
        return main_stronger(args, extra)
    out = Path(args.out)
    run = out / "run"
    if not args.analyse_only:
        if args.resume:
            cmd = ["--resume", str(run), *extra]
        else:
            if run.exists():
                raise SystemExit(f"{run} exists: use --resume, or another --out")
            cmd = ["--recipe", "spell", "--model", "smollm2", "--run_dir", str(run), "--generator", args.generator,
                   "--progress", "plain",
                   *(SMOKE if args.smoke else FULL), *extra]
        r = subprocess.run([sys.executable, "-m", "serl.cli", "train", *cmd], cwd=ROOT)
        if r.returncode:
            return r.returncode
    res = analyse(run, out)
    print((out / "results.md").read_text())
    print(json.dumps({k: res[k] for k in ("responder_strict", "verifier_bad_format")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
