"""One SeRL step of the efficacy experiment: per-stage wall time and peak memory of everything.

Runs ``serl train`` for ``--steps`` steps with the flags of experiments/serl_efficacy
(``train_flags()`` of its run.py, arm a: self-instruction on, majority vote) plus
``--flags``, which come last and so override. While it runs, a sampler reads every
``--interval`` seconds:

- ``rss``: the summed RSS of the trainer and all its descendants (vLLM engine core and
  workers, reaper), shared pages counted once per process that maps them;
- ``pss``: the same processes' PSS (shared pages split between their users), read on every
  20th sample only: reading smaps of a 15 GB process every 0.5 s took a fifth of a core;
- ``shm``: bytes under /dev/shm beyond what was there before the run (pushed weights,
  vLLM's message queues); files in /dev/shm are not in any RSS unless mapped;
- ``used``: the machine's MemTotal - MemAvailable (everything, other users included).

The headline is ``rss + shm`` at its peak (an upper bound: a mapped /dev/shm file counts in
both). Stage times come from the run's metrics.jsonl (``time/*``), reported per step with
the median over steps; the first step is included (there is no separate warm-up: engine
and model start-up are outside every ``time/step``).

    flock /tmp/vllm.lock env MALLOC_ARENA_MAX=2 python bench/serl_step.py --label baseline \\
        --flags "--micro_train_batch_size 2 --gradient_checkpointing true --init_kl_coef 0"
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import RESULTS, ROOT, append_result

sys.path.insert(0, str(ROOT / "experiments" / "serl_efficacy"))

STAGES = ("step", "instruct", "instruct_engine", "generate", "reward", "filter", "logprobs", "learner", "sync")
PSS_EVERY = 20  # PSS on every 20th sample only (RSS, /dev/shm and "used" on every one)
COUNTS = ("instruct/attempts", "instruct/completions", "instruct/gen_tokens", "instruct/candidates",
          "instruct/accepted", "instruct/truncated_completions", "instruct/empty_completions",
          "filter/rounds", "train/sequences", "response/length_mean",
          # the work of each stage, for roofline.py
          "instruct/prompt_tokens", "batch/rolled_out", "rollout/prompt_tokens", "rollout/gen_tokens",
          "train/batch_prompts", "train/logprob_tokens", "train/logprob_answer_tokens", "train/logprob_passes",
          "train/tokens", "actor/tokens", "actor/steps")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--label", required=True, help="name of this configuration in the record")
    ap.add_argument("--flags", default="", help="serl train flags added after the experiment's")
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between memory samples")
    ap.add_argument("--run_dir", default=None, help="run directory (default: a fresh temporary one)")
    ap.add_argument("--samples", default=None, help="write every memory sample here (CSV: seconds, GiB...)")
    ap.add_argument("--out", default=None, help="JSONL to append to (default bench/results.jsonl)")
    ap.add_argument("--task", default="arith", help="arith (the first rounds' settings) or a GSM8K task of the "
                    "third round, e.g. gsm8k_2step: its seeds, 384 tokens, LoRA 32 and its other TASK_FLAGS")
    return ap.parse_args(argv)


def command(args, run_dir: Path) -> list[str]:
    import run as efficacy  # experiments/serl_efficacy/run.py

    if args.task == "arith":
        ns = argparse.Namespace(**efficacy.FULL, model=args.model, generator="vllm", train_flags=args.flags,
                                task="arith", seeds_path=efficacy.SEEDS)
    else:  # the third round's seed file (write_task_files is deterministic: the same 200 seeds)
        from tasks import write_task_files

        full = efficacy.TASK_FULL
        files = write_task_files(args.task, run_dir.parent / "task", full["seeds"], full["heldout"], full["transfer"])
        ns = argparse.Namespace(**full, model=args.model, generator="vllm", train_flags=args.flags,
                                task=args.task, seeds_path=files["seeds"])
    flags = efficacy.train_flags(ns) + efficacy.ARMS["a"][1]
    return [sys.executable, "-m", "serl.cli", "train", *flags, "--steps", str(args.steps),
            "--run_dir", str(run_dir), "--progress", "plain"]


def shm_bytes() -> int:
    total = 0
    for dirpath, _, files in os.walk("/dev/shm"):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_blocks * 512
            except OSError:
                pass
    return total


def mem_used() -> int:
    info = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        k, v = line.split(":", 1)
        info[k] = int(v.split()[0]) * 1024
    return info["MemTotal"] - info["MemAvailable"]


class Sampler(threading.Thread):
    """Peak of each memory measure over the life of ``pid``'s process tree."""

    def __init__(self, pid: int, interval: float):
        super().__init__(daemon=True)
        import psutil

        self.root, self.interval = psutil.Process(pid), interval
        self.shm0, self.used0 = shm_bytes(), mem_used()
        self.peak = {"rss": 0, "pss": 0, "shm": 0, "rss_plus_shm": 0, "pss_plus_shm": 0, "used": 0,
                     "processes": 0}
        self.samples = 0
        self.rows: list[tuple] = []  # (seconds since start, rss, pss, shm, used) in bytes
        self.t0 = time.perf_counter()
        self.stop = threading.Event()

    def run(self):
        import psutil

        while not self.stop.is_set():
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.Error:
                break
            rss = pss = 0
            full = self.samples % PSS_EVERY == 0  # smaps is costly to read for a 15 GB process
            for p in procs:
                try:
                    if full:
                        m = p.memory_full_info()
                        rss, pss = rss + m.rss, pss + m.pss
                    else:
                        rss += p.memory_info().rss
                except psutil.Error:
                    pass
            shm = max(0, shm_bytes() - self.shm0)
            now = {"rss": rss, "pss": pss, "shm": shm, "rss_plus_shm": rss + shm,
                   "pss_plus_shm": pss + shm if full else 0,
                   "used": mem_used(), "processes": len(procs)}
            self.peak = {k: max(v, now[k]) for k, v in self.peak.items()}
            self.samples += 1
            self.rows.append((round(time.perf_counter() - self.t0, 2), rss, pss, shm, now["used"]))
            self.stop.wait(self.interval)


def main(argv=None) -> int:
    args = parse_args(argv)
    tmp = None
    if args.run_dir:
        run_dir = Path(args.run_dir)
    else:
        tmp = tempfile.mkdtemp(prefix="serl-step-bench-")
        run_dir = Path(tmp) / "run"
    cmd = command(args, run_dir)
    print("$", shlex.join(cmd), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT)
    sampler = Sampler(proc.pid, args.interval)
    sampler.start()
    rc = proc.wait()
    sampler.stop.set()
    sampler.join()
    wall = time.perf_counter() - t0
    if rc != 0:  # the steps done and the memory seen so far are still worth reporting
        print(f"serl train exited {rc} (run dir {run_dir}; -9: killed, e.g. by the OOM killer)")
    if args.samples:
        with open(args.samples, "w") as f:
            f.write("seconds,rss_gib,pss_gib,shm_gib,used_gib\n")
            for t, *m in sampler.rows:
                f.write(f"{t}," + ",".join(f"{x / 2 ** 30:.3f}" for x in m) + "\n")
    mfile = run_dir / "metrics.jsonl"
    rows = [json.loads(x) for x in mfile.read_text().splitlines() if x.strip()] if mfile.exists() else []
    rows = [r for r in rows if "time/step" in r]
    gib = 2 ** 30
    print(f"\n{args.label}: {len(rows)} steps, wall {wall:.0f} s (start-up included), "
          f"{sampler.samples} memory samples")
    print("step  " + "  ".join(f"{s[:9]:>9}" for s in STAGES))
    for r in rows:
        print(f"{r['step']:>4}  " + "  ".join(f"{r.get('time/' + s, 0.0):9.1f}" for s in STAGES))
    med = {s: round(statistics.median([r.get("time/" + s, 0.0) for r in rows] or [0.0]), 2) for s in STAGES}
    print("med   " + "  ".join(f"{med[s]:9.1f}" for s in STAGES))
    counts = {c: [r.get(c) for r in rows] for c in COUNTS}
    for c, v in counts.items():
        print(f"  {c}: {v}")
    peak = {k: (round(v / gib, 2) if k != "processes" else v) for k, v in sampler.peak.items()}
    print("peak memory (GiB): " + ", ".join(f"{k} {v}" for k, v in peak.items())
          + f" (used is machine-wide; it was {sampler.used0 / gib:.2f} GiB before the run)")
    prec = run_dir / "precision.json"  # what --bf16 / --generator_dtype auto chose (serl.engines.precision)
    precision = json.loads(prec.read_text())["segments"][-1] if prec.is_file() else None
    append_result({"bench": "serl_step", "precision": precision, "label": args.label, "exit_code": rc, "model": args.model, "task": args.task, "flags": args.flags,
                   "command": shlex.join(cmd[1:]), "steps": len(rows), "wall_s": round(wall, 1),
                   "median_s": med, "per_step_s": [{s: round(r.get("time/" + s, 0.0), 2) for s in STAGES}
                                                   for r in rows],
                   "counts": counts, "peak_gib": peak, "used_before_gib": round(sampler.used0 / gib, 2),
                   "memory_samples": sampler.samples}, args.out or RESULTS)
    if tmp:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if rc else 0


if __name__ == "__main__":
    sys.exit(main())
