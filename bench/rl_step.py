"""Full RL step: serl vs TRL's GRPOTrainer, same model, prompts, samples and update.

Both sides: SmolLM2-135M-Instruct, the first 16 SeRL seed problems in the chat template
with the same "put the final answer in \\boxed{}" instruction, 8 samples each at
temperature 1.0 / top_p 1.0, at most 128 new tokens, the majority-vote reward (serl's
vote code on both sides), GRPO group-normalised advantages, no KL, AdamW at lr 1e-6 with
a constant schedule, micro-batches of 8 sequences, one optimizer step per 16 x 8
samples, bf16 with fp32 optimizer state (serl: bf16 weights with fp32 masters, its default; TRL:
autocast over fp32 weights). serl runs as a user runs it (`serl train`,
vLLM generation, torch learner, weight sync every step, no self-instruction, difficulty
filter off); TRL runs its defaults for the rest (transformers `generate`). Each run is a
fresh process doing ``--steps`` steps; the first step of each run is warm-up and not
counted; the sides alternate serl, TRL, serl, TRL, ... Model loading and engine start-up
are outside the step times on both sides.

    python bench/rl_step.py --trl-python .venv-bench/bin/python     # make bench does this
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, append_result, math_prompts, smollm2_path, spread

SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
SERL_STAGES = ("generate", "reward", "filter", "logprobs", "learner", "sync")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=16, help="prompts per step")
    ap.add_argument("--samples", type=int, default=8, help="samples per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="max tokens per sample")
    ap.add_argument("--steps", type=int, default=2, help="steps per run (the first is warm-up)")
    ap.add_argument("--runs", type=int, default=2, help="runs per side, alternating")
    ap.add_argument("--lr", type=float, default=1e-6, help="AdamW learning rate (both sides)")
    ap.add_argument("--micro-batch", type=int, default=8, help="sequences per forward/backward")
    ap.add_argument("--trl-python", default=None,
                    help="python that has TRL (default: .venv-bench/bin/python, else this one)")
    ap.add_argument("--side", choices=("both", "serl", "trl"), default="both", help="which side(s) to run")
    ap.add_argument("--work", default=None,
                    help="folder for the runs (default: a new temp dir); runs already complete there "
                         "are reused, so an interrupted bench continues where it stopped")
    ap.add_argument("--out", default=None, help="JSONL to append to (default bench/results.jsonl)")
    return ap.parse_args(argv)


def _run(cmd: list[str], cwd: Path, log: Path, env: dict | None = None) -> tuple[int, str]:
    """Run in a new session with output to a file, then kill whatever it left behind: an
    engine process orphaned by a crash (e.g. the OOM killer) must not hang or load the
    next run."""
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                             env=None if env is None else {**os.environ, **env})
        code = p.wait()
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return code, log.read_text(errors="replace")


def run_serl(args, model: str, seeds: Path, work: Path, run: int, extra: tuple[str, ...] = ()) -> list[dict]:
    run_dir = work / f"serl-{run}"
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists() and len(metrics.read_text().splitlines()) == args.steps:  # --work: done before
        return _serl_steps(metrics)
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [sys.executable, "-m", "serl.cli", "train", "--model", model, "--prompt_data", str(seeds),
           "--run_dir", str(run_dir), "--steps", str(args.steps),
           "--rollout_batch_size", str(args.prompts), "--n_samples_per_prompt", str(args.samples),
           "--max_refill_rounds", "1", "--enable_self_evolution", "false",
           "--reward_difficulty_bounds", "0", "1", "--generate_max_len", str(args.max_new_tokens),
           "--temperature", "1.0", "--top_p", "1.0", "--advantage_estimator", "group_norm",
           "--init_kl_coef", "0", "--actor_learning_rate", str(args.lr), "--lr_warmup_ratio", "0",
           "--min_lr_ratio", "1", "--micro_train_batch_size", str(args.micro_batch), "--bf16",
           "--generator", "vllm", "--save_steps", "0", "--save_model", "false", "--progress", "quiet",
           "--system_prompt", SYSTEM, *extra]
    code, log = _run(cmd, ROOT, run_dir.with_suffix(".log"))
    if code != 0:
        raise SystemExit(f"serl train failed (exit {code}); its log: {run_dir.with_suffix('.log')}\n{log[-3000:]}")
    return _serl_steps(metrics)


def _serl_steps(metrics: Path) -> list[dict]:
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    return [{"step": m["time/step"], **{s: m.get(f"time/{s}", 0.0) for s in SERL_STAGES}} for m in rows]


def run_trl(args, python: str, model: str, messages: list[str], work: Path, run: int,
            extra: tuple[str, ...] = (), env: dict | None = None) -> tuple[str, list[dict]]:
    logf = work / f"trl-{run}.log"
    done = _trl_result(logf.read_text(errors="replace")) if logf.exists() else None
    if done and len(done["steps"]) == args.steps:  # --work: done before
        return done["trl"], done["steps"]
    pf = work / "prompts.json"
    pf.write_text(json.dumps(messages))
    cmd = [python, str(ROOT / "bench" / "_trl_grpo.py"), "--model", model, "--prompts-file", str(pf),
           "--steps", str(args.steps), "--samples", str(args.samples), "--max-new-tokens",
           str(args.max_new_tokens), "--lr", str(args.lr), "--micro-batch", str(args.micro_batch),
           "--root", str(ROOT), *extra]
    code, log = _run(cmd, work, logf, env)
    res = _trl_result(log)
    if code != 0 or res is None:
        raise SystemExit(f"TRL run failed (exit {code}); its log: {logf}\n{log[-3000:]}")
    return res["trl"], res["steps"]


def _trl_result(log: str) -> dict | None:
    line = next((x for x in log.splitlines() if x.startswith("TRL_RESULT ")), None)
    return json.loads(line[len("TRL_RESULT "):]) if line else None


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.steps < 2:
        raise SystemExit("--steps must be >= 2 (the first step of a run is warm-up)")
    trl_python = args.trl_python or next(
        (str(p) for p in [ROOT / ".venv-bench" / "bin" / "python"] if p.exists()), sys.executable)
    model = smollm2_path()
    questions = math_prompts(args.prompts)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="serl-rl-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"runs and logs in {work}")
    seeds = work / "seeds.jsonl"
    seeds.write_text("".join(json.dumps({"problem": q}) + "\n" for q in questions))
    messages = [f"{q}\n{SYSTEM}" for q in questions]  # serl's chat_prompt puts the instruction here too

    timed: dict[str, list[dict]] = {"serl": [], "trl": []}
    trl_version = None
    for run in range(args.runs):
        if args.side in ("both", "serl"):
            steps = run_serl(args, model, seeds, work, run)
            timed["serl"] += steps[1:]
            print(f"run {run + 1} serl: " + ", ".join(f"{s['step']:.1f}" for s in steps) + " s/step")
        if args.side in ("both", "trl"):
            trl_version, steps = run_trl(args, trl_python, model, messages, work, run)
            timed["trl"] += steps[1:]
            print(f"run {run + 1} TRL:  " + ", ".join(f"{s['step']:.1f}" for s in steps) + " s/step")

    summary = {}
    for side, steps in timed.items():
        if not steps:
            continue
        keys = [k for k in steps[0] if k != "step"]
        summary[side] = {"step": spread([s["step"] for s in steps]),
                         "stages_median_s": {k: round(statistics.median(s.get(k, 0.0) for s in steps), 2)
                                             for k in keys}}
    print(f"\n{args.prompts} prompts x {args.samples} samples, <= {args.max_new_tokens} new tokens, "
          f"{args.runs} alternating runs x {args.steps - 1} timed steps per side")
    print(f"{'side':<8}{'median s/step':>14}{'min':>8}{'max':>8}   stages (median s)")
    for side, s in summary.items():
        st = ", ".join(f"{k} {v:.1f}" for k, v in s["stages_median_s"].items())
        print(f"{side:<8}{s['step']['median']:>14.1f}{s['step']['min']:>8.1f}{s['step']['max']:>8.1f}   {st}")
    ratio = None
    if len(summary) == 2:
        ratio = summary["serl"]["step"]["median"] / summary["trl"]["step"]["median"]
        print(f"serl / TRL step time: {ratio:.3f} (target <= 0.333)")
    import torch
    import transformers

    append_result({"bench": "rl_step", "trl": trl_version, "torch": torch.__version__,
                   "transformers": transformers.__version__, "prompts": args.prompts,
                   "samples": args.samples, "max_new_tokens": args.max_new_tokens,
                   "runs": args.runs, "steps_per_run": args.steps, "lr": args.lr,
                   "micro_batch": args.micro_batch, "summary": summary, "steps": timed,
                   "ratio": round(ratio, 4) if ratio else None,
                   "target_met": (ratio <= 1 / 3) if ratio else None},
                  **({"out": args.out} if args.out else {}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
