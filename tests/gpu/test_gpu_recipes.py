"""The SPIN, online-DPO, SPIRAL and SPELL recipes on a CUDA device: one tiny step each of the
real SmolLM2 with the transformers generator and the torch learner in bf16, everything on
the GPU. Each test skips with a reason when torch sees no CUDA device."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none)"),
]

ON_GPU = ["--generator", "hf", "--device", "cuda", "--bf16", "--progress", "quiet", "--save_model", "false"]
RECIPES = {
    "spin": [
        "--recipe",
        "spin",
        "--spin_mode",
        "spin",
        "--iteration_size",
        "4",
        "--rollout_batch_size",
        "4",
        "--generate_max_len",
        "24",
        "--prompt_data",
        ROOT / "dataset/arith_spin_train.jsonl",
    ],
    "online": [
        "--recipe",
        "spin",
        "--spin_mode",
        "online",
        "--rollout_batch_size",
        "4",
        "--n_samples_per_prompt",
        "4",
        "--generate_max_len",
        "24",
        "--reward_mode",
        "rule",
        "--prompt_data",
        ROOT / "dataset/arith_spin_train.jsonl",
    ],
    "spiral": [
        "--recipe",
        "spiral",
        "--games",
        "kuhn_poker",
        "--games_per_step",
        "4",
        "--max_turns",
        "4",
        "--generate_max_len",
        "24",
        "--opponent",
        "self",
        "--filter_zero_adv",
        "false",
        "--mask_truncated",
        "false",
        "--ppo_epochs",
        "1",
        "--actor_learning_rate",
        "1e-5",
    ],
    "spell": [
        "--recipe",
        "spell",
        "--rollout_batch_size",
        "2",
        "--n_samples_per_prompt",
        "2",
        "--verifier_samples",
        "2",
        "--grounding_samples",
        "1",
        "--max_refill_rounds",
        "1",
        "--cluster_size",
        "2",
        "--paragraphs_per_prompt",
        "1",
        "--questioner_max_len",
        "32",
        "--generate_max_len",
        "32",
        "--verifier_max_len",
        "16",
        "--heldout_eval",
        "false",
        "--corpus",
        ROOT / "dataset/docs_train.jsonl",
    ],
}
# a key each recipe logs at every step, with a finite value, whatever the model wrote
STEP_KEY = {
    "spin": "dpo/margin",
    "online": "pairs/groups",
    "spiral": "spiral/learner_turns",
    "spell": "questioner/asked",
}


@pytest.mark.parametrize("name", list(RECIPES))
def test_one_step_of_each_recipe_on_cuda(name, tmp_path, smol_path):
    run = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "serl.cli",
        "train",
        "--run_dir",
        str(run),
        "--steps",
        "1",
        *map(str, ON_GPU + RECIPES[name]),
    ]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    step = {k: v for row in rows if row["step"] == 1 for k, v in row.items()}
    assert STEP_KEY[name] in step and math.isfinite(step[STEP_KEY[name]]), sorted(step)
    if "loss/policy" in step:  # SPELL updates only when some role had a reward spread
        assert math.isfinite(step["loss/policy"])
