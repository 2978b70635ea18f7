"""Step time of each recipe's measured configuration (issue 46): the quickstart (SeRL on
SmolLM2), one SPIRAL and one SPELL configuration on Qwen2.5-Coder-0.5B.

Each is a ``serl train`` run of a few steps in a fresh run directory; the per-step stage times
come from its metrics.jsonl (``time/*``), and the record keeps every step's, the median of
``time/step`` and the run's wall time (start-up included). ``--tree DIR`` runs another
checkout's serl (e.g. a worktree of the commit before a change) with the same command, so a
before/after pair is two calls with the same ``--config``, taken in turn.

    python bench/recipe_steps.py --config spiral-qwen --label after
    python bench/recipe_steps.py --config spiral-qwen --label before --tree ../serl-before
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import RESULTS, ROOT, append_result

QWEN = "qwen2.5-coder-0.5b"
# the second SPIRAL plan's training flags (experiments/spiral/run.py --plan stronger2: LoRA 32, 384
# tokens, lenient parser, the KL term in the loss at 0.5), with evaluation and checkpoints off
SPIRAL = ["--recipe", "spiral", "--model", QWEN, "--games", "kuhn_poker,tictactoe", "--kuhn_rules", "standard",
          "--opponent", "population", "--population_size", "4", "--population_every", "4", "--games_per_step", "32",
          "--generate_max_len", "384", "--actor_learning_rate", "5e-5", "--ppo_epochs", "1", "--bf16", "true",
          "--eval_steps", "0", "--eval_games", "0", "--action_parser", "lenient", "--lora_rank", "32",
          "--lora_alpha", "64", "--vllm_kv_cache_gib", "0.5", "--micro_train_batch_size", "4", "--temperature", "1.0",
          "--mask_truncated", "true", "--use_kl_loss", "true", "--kl_estimator", "k3", "--init_kl_coef", "0.5"]
# SPELL's stronger plan on Qwen (experiments/spell/stronger.py FULL + LORA, the probe's prefills), no held-out
SPELL = ["--recipe", "spell", "--model", QWEN, "--rollout_batch_size", "8", "--n_samples_per_prompt", "8",
         "--verifier_samples", "3", "--grounding_samples", "4", "--max_refill_rounds", "2", "--compact_prompts", "true",
         "--questioner_temperature", "0.7", "--few_shot_questioner", "false", "--questioner_max_len", "128",
         "--generate_max_len", "128", "--verifier_max_len", "48", "--prompt_max_len", "1024",
         "--actor_learning_rate", "2e-5", "--temperature", "1.0", "--bf16", "true", "--heldout_eval", "false",
         "--lora_rank", "32", "--lora_alpha", "64", "--vllm_kv_cache_gib", "0.5", "--micro_train_batch_size", "4",
         "--questioner_prefill", "on", "--verifier_prefill", "off"]
CONFIGS = {
    "quickstart": (["--config", "configs/quickstart.yaml"], 3),
    "spiral-qwen": (SPIRAL, 2),
    "spell-qwen": (SPELL, 2),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, choices=sorted(CONFIGS))
    ap.add_argument("--label", required=True, help="name of this side in the record (before, after, ...)")
    ap.add_argument("--tree", default=str(ROOT), help="the checkout whose serl runs (default: this one)")
    ap.add_argument("--steps", type=int, default=None, help="steps (default: the configuration's)")
    ap.add_argument("--flags", default="", help="serl train flags added last")
    ap.add_argument("--out", default=None, help="JSONL to append to (default bench/results.jsonl)")
    a = ap.parse_args(argv)
    flags, steps = CONFIGS[a.config]
    run_dir = Path(tempfile.mkdtemp(prefix="serl-recipe-bench-")) / "run"
    cmd = [sys.executable, "-m", "serl.cli", "train", *flags, "--steps", str(a.steps or steps), "--run_dir",
           str(run_dir), "--progress", "plain", "--save_model", "false", *shlex.split(a.flags)]
    print("$", shlex.join(cmd), f"(in {a.tree})", flush=True)
    t0 = time.perf_counter()
    rc = subprocess.run(cmd, cwd=a.tree).returncode
    wall = time.perf_counter() - t0
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()] \
        if (run_dir / "metrics.jsonl").exists() else []
    rows = [r for r in rows if "time/step" in r]
    per_step = [{k[5:]: round(v, 2) for k, v in r.items() if k.startswith("time/")} for r in rows]
    for r in per_step:
        print("  ".join(f"{k} {v:.1f}" for k, v in r.items()))
    med = statistics.median([r["step"] for r in per_step]) if per_step else None
    print(f"{a.config} {a.label}: exit {rc}, {len(rows)} steps, median step {med} s, wall {wall:.0f} s")
    append_result({"bench": "recipe_steps", "config": a.config, "label": a.label, "exit_code": rc,
                   "command": shlex.join(cmd[1:]), "tree": a.tree, "steps": len(rows), "median_step_s": med,
                   "per_step_s": per_step, "wall_s": round(wall, 1)}, a.out or RESULTS)
    return 1 if rc else 0


if __name__ == "__main__":
    sys.exit(main())
