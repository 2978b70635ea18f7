"""GPU placement: one SeRL step on SmolLM2 with the policy, reference and batches on CUDA
(torch learner; DeepSpeed ZeRO-2 in one process), and weight push into vLLM on the GPU.
Every test skips with a reason when torch sees no CUDA device."""

import json
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

STEP = [
    "--generator",
    "hf",
    "--device",
    "cuda",
    "--steps",
    "1",
    "--rollout_batch_size",
    "2",
    "--n_samples_per_prompt",
    "4",
    "--enable_self_evolution",
    "false",
    "--generate_max_len",
    "32",
    "--reward_difficulty_bounds",
    "0",
    "1",
    "--max_refill_rounds",
    "1",
    "--bf16",
    "--actor_learning_rate",
    "1e-5",
    "--init_kl_coef",
    "1e-3",
    "--progress",
    "quiet",
    "--prompt_data",
    str(ROOT / "dataset/arith_seed.jsonl"),
]


def _train(run_dir: Path, *extra: str) -> dict:
    r = subprocess.run(
        [sys.executable, "-m", "serl.cli", "train", "--run_dir", str(run_dir), *STEP, *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {k: v for row in rows if row["step"] == 1 for k, v in row.items()}


def test_torch_learner_step_on_cuda(tmp_path, smol_path):
    m = _train(tmp_path / "run")
    assert m["actor/updates"] == 1.0 and m["actor/skipped"] == 0.0 and "kl/mean" in m


def test_learner_places_policy_reference_and_batches_on_cuda(smol_path):
    from serl.engines.base import TrainBatch
    from serl.engines.learner_core import LearnerConfig
    from serl.engines.torch_learner import TorchLearner

    learner = TorchLearner(smol_path, LearnerConfig(device="cuda", bf16=True, kl_loss_coef=0.1), need_ref=True)
    assert next(learner.policy.parameters()).is_cuda and next(learner.ref.parameters()).is_cuda
    prompts, responses = [[1, 2, 3], [4, 5]], [[6, 7], [8, 9, 10]]
    lp = learner.logprobs(prompts, responses)
    assert all(t.device.type == "cpu" and t.shape == (len(r),) for t, r in zip(lp, responses))
    m = learner.step(TrainBatch(prompts, responses, [torch.ones(len(r)) for r in responses]))
    assert m["actor/skipped"] == 0.0


def test_deepspeed_zero2_step_on_cuda(tmp_path, smol_path):
    pytest.importorskip("deepspeed", reason="deepspeed not installed")
    m = _train(tmp_path / "run", "--learner", "deepspeed", "--zero_stage", "2")
    assert m["actor/updates"] == 1.0 and m["actor/skipped"] == 0.0


def test_weight_push_into_vllm_on_gpu(smol_path):
    pytest.importorskip("vllm", reason="vllm not installed")
    from serl.engines.base import Sampling
    from serl.engines.causal_lm import load_causal_lm
    from serl.engines.factory import make_generator

    gen = make_generator("vllm", smol_path, seed=0, max_model_len=512, gpu_memory_utilization=0.3)
    try:
        model = load_causal_lm(smol_path)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(0.0)  # a policy that is clearly not the original one
        gen.load_weights(model.named_parameters())
        out = gen.generate(["1 + 1 ="], 1, Sampling(max_new_tokens=8, temperature=0.0, logprobs=True))
        # all-zero weights give uniform logits: every sampled token has log-prob -log(V)
        vocab = model.config.vocab_size
        assert all(abs(lp + torch.log(torch.tensor(float(vocab))).item()) < 0.05 for lp in out[0][0].logprobs)
    finally:
        gen.close()
