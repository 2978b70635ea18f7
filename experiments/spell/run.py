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
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's serl

from analysis import analyse  # noqa: E402  (beside this file)

# the bootstrap (probe_json.py, probe_verifier.py, README): the questioner's reply starts with
# '{"question": "' and it samples at 0.7; the verifier's reply starts with '[['; the
# one-example bootstrap is off (the model copies it)
BOOTSTRAP = ["--compact_prompts", "true", "--questioner_prefill", "on", "--questioner_temperature", "0.7",
             "--few_shot_questioner", "false", "--verifier_prefill", "on"]
FULL = ["--steps", "10", "--rollout_batch_size", "8", "--n_samples_per_prompt", "8", "--verifier_samples", "3",
        "--grounding_samples", "4", "--max_refill_rounds", "2", *BOOTSTRAP,
        "--questioner_max_len", "96", "--generate_max_len", "96", "--verifier_max_len", "48",
        "--prompt_max_len", "1024", "--actor_learning_rate", "2e-6", "--temperature", "1.0", "--bf16", "auto",
        "--eval_qa_limit", "0", "--eval_verify_limit", "0", "--eval_questioner_limit", "20"]
SMOKE = ["--steps", "2", "--rollout_batch_size", "2", "--n_samples_per_prompt", "2", "--verifier_samples", "2",
         "--grounding_samples", "1", "--max_refill_rounds", "1", *BOOTSTRAP, "--questioner_max_len", "48",
         "--generate_max_len", "48", "--verifier_max_len", "24", "--prompt_max_len", "1024",
         "--eval_qa_limit", "8", "--eval_verify_limit", "8", "--eval_questioner_limit", "2"]
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
