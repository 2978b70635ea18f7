"""Step time with and without ``--async_train``, for SeRL and SPIRAL, on this machine.

For each recipe, runs ``serl train`` twice with the same tiny settings (the transformers
generator, ``--steps`` steps), once synchronous and once with ``--async_train``, and reads
``time/step`` from each run's metrics.jsonl. Reported: the median step time of steps 2..N
(step 1 collects before any overlap can happen), the mean, and for the async run
``time/collect_wait`` (how long the update waited for the next collect: the part of
generation the overlap did not hide). Appends one JSON line to bench/results.jsonl.

    python bench/async_step.py --steps 6          # both recipes
    python bench/async_step.py --recipes spiral --flags "--generator vllm"

On a 2-core CPU generation and the update compete for the same cores, so the overlap
can only pay as far as one of them leaves cores idle; run it on a quiet machine.
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, append_result

SETTINGS = {
    "serl": ["--recipe", "serl", "--rollout_batch_size", "2", "--n_samples_per_prompt", "4",
             "--generate_max_len", "64", "--enable_self_evolution", "false", "--reward_difficulty_bounds", "0", "1",
             "--prompt_data", str(ROOT / "dataset/arith_seed.jsonl")],
    "spiral": ["--recipe", "spiral", "--games", "kuhn_poker", "--games_per_step", "4", "--generate_max_len", "64"],
}
COMMON = ["--generator", "hf", "--progress", "quiet", "--save_model", "false", "--save_steps", "0"]


def step_times(recipe: str, steps: int, asynchronous: bool, flags: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as d:
        run = Path(d) / "run"
        cmd = [sys.executable, "-m", "serl.cli", "train", *SETTINGS[recipe], *COMMON, "--steps", str(steps),
               "--run_dir", str(run), *(["--async_train"] if asynchronous else []), *flags]
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(map(shlex.quote, cmd))} failed:\n{r.stderr[-3000:]}")
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rows = [m for m in rows if "time/step" in m]
    later = [m["time/step"] for m in rows[1:]] or [rows[0]["time/step"]]
    return {"steps": len(rows), "median_s": statistics.median(later), "mean_s": statistics.mean(later),
            "first_s": rows[0]["time/step"],
            "collect_wait_s": statistics.mean(m.get("time/collect_wait", 0.0) for m in rows[1:]) if len(rows) > 1
            else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipes", default="serl,spiral")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--flags", default="", help="more serl train flags for both runs")
    args = ap.parse_args()
    flags = shlex.split(args.flags)
    out = {}
    for recipe in args.recipes.split(","):
        sync, asyn = (step_times(recipe, args.steps, a, flags) for a in (False, True))
        out[recipe] = {"sync": sync, "async": asyn, "speedup": sync["median_s"] / asyn["median_s"]}
        print(f"{recipe:7s} sync {sync['median_s']:7.2f} s/step   async {asyn['median_s']:7.2f} s/step   "
              f"({out[recipe]['speedup']:.2f}x; the update waited {asyn['collect_wait_s']:.2f} s per step for the "
              f"next collect)")
    append_result({"bench": "async_step", "steps": args.steps, "flags": args.flags, "results": out})


if __name__ == "__main__":
    main()
