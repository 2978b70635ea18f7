"""DeepSpeedLearner with LoRA under torchrun (DS_ACCELERATOR=cpu, gloo): one rank on ZeRO-2,
two ranks on ZeRO-3.

Checked against the torch learner with the same adapter on the same batch: scores, the
update's metrics and the merged weights; the reference (adapter off) equals the base;
and the checkpoint (adapter in PEFT layout, DeepSpeed state of the adapter only) resumes
the next step exactly.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("deepspeed") is None,
        reason="deepspeed is not installed (pip install 'serl[deepspeed]')",
    ),
]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WORKER = HERE / "ds_worker.py"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> str:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    path = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(cfg).save_pretrained(path)
    return str(path)


def _worker_module():
    spec = importlib.util.spec_from_file_location("ds_worker", WORKER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("ranks,stage", [(1, 2), (2, 3)], ids=["zero2-1rank", "zero3-2ranks"])
def test_lora_matches_torch_learner_and_resumes(tiny_llama, tmp_path, ranks, stage):
    torchrun = Path(sys.executable).with_name("torchrun")
    env = dict(
        os.environ,
        DS_ACCELERATOR="cpu",
        OMP_NUM_THREADS="1",
        PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    )
    cmd = [
        str(torchrun),
        "--nproc_per_node",
        str(ranks),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(_port()),
        str(WORKER),
        "--model",
        tiny_llama,
        "--out",
        str(tmp_path),
        "--stage",
        str(stage),
        "--kl",
        "--lora_rank",
        "4",
    ]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = torch.load(tmp_path / "result.pt", weights_only=False)

    from serl.engines.base import TrainBatch
    from serl.engines.torch_learner import LearnerConfig, TorchLearner

    w = _worker_module()
    cfg = LearnerConfig(
        actor_learning_rate=1e-3,
        lr_warmup_ratio=0.0,
        total_steps=10,
        micro_batch_size=2,
        kl_loss_coef=0.1,
        seed=0,
        lora_rank=4,
    )
    ln = TorchLearner(tiny_llama, cfg, need_ref=True)
    p, resp, adv = w.batch(1, 5, ln.policy.config.vocab_size)
    old = ln.logprobs(p, resp)
    for a, b in zip(res["logprobs"], old):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    # the reference is the base with the adapter off; a fresh adapter (B = 0) changes nothing yet
    assert all(torch.equal(a, b) for a, b in zip(res["ref_logprobs"], res["logprobs"]))
    m_ref = ln.step(TrainBatch(p, resp, adv, [o + 0.01 for o in old]))
    for key in ("loss/policy", "loss/kl", "actor/grad_norm", "actor/entropy", "actor/lr", "actor/updates"):
        assert res["m1"][key] == pytest.approx(m_ref[key], rel=1e-4, abs=1e-7), key
    merged = torch.load(tmp_path / "weights_rank0.pt")
    ours = dict(ln.named_weights())
    assert list(merged) == list(ours)  # HF names of the base model, merged
    for k in ours:
        torch.testing.assert_close(merged[k], ours[k], rtol=0, atol=2e-6)
    # the checkpoint: the adapter in PEFT layout, DeepSpeed's state without the frozen base
    names = {f.name for f in (tmp_path / "ckpt").iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json", "lora_state.pt", "deepspeed"} <= names
    states = torch.load(next((tmp_path / "ckpt" / "deepspeed").rglob("*model_states.pt")), weights_only=False)
    keys = list(states["module"])
    assert keys and all(".lora_" in k for k in keys), keys[:5]  # the adapter only, not the model
    # the final model: the adapter alone, no optimizer or LoRA training state
    final = {f.name for f in (tmp_path / "final").iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json"} <= final
    assert "deepspeed" not in final and not [n for n in final if n.endswith(".pt")], final
    # resume: the step after load repeats the step after save exactly
    assert res["m2_again"] == res["m2"]
    assert res["nan_unchanged"] and res["m_nan"]["actor/skipped"] == 1.0
