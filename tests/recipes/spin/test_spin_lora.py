"""A tiny SPIN run with LoRA on SmolLM2 (transformers generator): 3 steps in one go and
1 step + --resume to 3 give the same metrics and the same final adapter. SPIN refreshes
its reference at each iteration (``sync_ref``); under LoRA that is a snapshot of the
adapter on the shared base, so the first step of each iteration starts at margin 0."""

import json
import math
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]

TINY_SPIN_LORA = [
    "--recipe",
    "spin",
    "--generator",
    "hf",
    "--iteration_size",
    "2",
    "--rollout_batch_size",
    "2",
    "--epochs_per_iteration",
    "1",
    "--generate_max_len",
    "12",
    "--actor_learning_rate",
    "1e-3",
    "--lr_warmup_ratio",
    "0",
    "--micro_train_batch_size",
    "4",
    "--progress",
    "quiet",
    "--save_model",
    "true",
    "--report",
    "false",
    "--max_ckpt_num",
    "3",
    "--lora_rank",
    "8",
    "--lora_alpha",
    "16",
    "--prompt_data",
    str(ROOT / "dataset/arith_spin_train.jsonl"),
]


def _metrics(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/") and k != "wall_time"} for r in rows]


def test_spin_lora_resumes_exactly_and_refreshes_the_reference(tmp_path, serl_start):
    from safetensors.torch import load_file

    a, b = tmp_path / "a", tmp_path / "b"
    # the two first runs side by side (conftest's serl_start: one thread each), and so the resume too
    runs = [
        serl_start(*TINY_SPIN_LORA, "--steps", "3", "--run_dir", a),
        serl_start(*TINY_SPIN_LORA, "--steps", "1", "--run_dir", b),
    ]
    for r in [run.wait(timeout=3600) for run in runs]:
        assert r.returncode == 0, r.stderr[-3000:]
    r = serl_start("--resume", b, "--steps", "3").wait(timeout=3600)  # step 2 starts iteration 1: sync_ref
    assert r.returncode == 0, r.stderr[-3000:]  # after a resume
    ma, mb = _metrics(a), _metrics(b)
    assert ma == mb
    assert [m["spin/iteration"] for m in ma] == [0, 1, 1]
    # iteration starts: the reference equals the policy (base + adapter off at 0, the adapter's
    # snapshot at 1), so every pair's margin is 0 and the sigmoid DPO loss is log 2
    for i in (0, 1):
        assert ma[i]["loss/policy"] == pytest.approx(math.log(2), abs=1e-4), i
    assert ma[2]["loss/policy"] != pytest.approx(math.log(2), abs=1e-4)  # inside the iteration it moves
    ad_a = load_file(str(a / "model" / "adapter_model.safetensors"))
    ad_b = load_file(str(b / "model" / "adapter_model.safetensors"))
    assert set(ad_a) == set(ad_b) and all(torch.equal(ad_a[k], ad_b[k]) for k in ad_a)
    assert any(k.endswith("lora_B.weight") and ad_a[k].abs().max() > 0 for k in ad_a)
