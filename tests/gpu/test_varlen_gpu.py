"""Packed micro-batches on CUDA (issue 35): the attention ``auto`` picks there, and packed
log-probs and gradients equal padded ones to bf16 tolerance, through SDPA per sequence and
(when flash-attn imports) flash-attn's varlen kernel. Skips with a reason without CUDA;
the flash-attn cases also without flash-attn. Timing: bench/varlen_gpu.py."""

import pytest
import torch

from serl.engines.attention import flash_attn_importable
from serl.engines.learner_core import LearnerConfig
from serl.engines.torch_learner import TorchLearner

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none)")
_flash = flash_attn_importable() if torch.cuda.is_available() else (False, "needs a CUDA GPU (torch sees none)")
needs_flash = pytest.mark.skipif(not _flash[0], reason=f"{_flash[1]} (pip install 'serl[flash-attn]')")
BF16_TOL = 0.05  # bf16 rounding between two attention kernels


def _batch():
    g = torch.Generator().manual_seed(0)
    lens = [(5, 40), (60, 7), (1, 100), (33, 33), (12, 3), (80, 50)]
    prompts = [torch.randint(3, 256, (p,), generator=g).tolist() for p, _ in lens]
    responses = [torch.randint(3, 256, (r,), generator=g).tolist() for _, r in lens]
    return prompts, responses


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=256,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=16,
        tie_word_embeddings=True,
        initializer_range=0.1,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    path = tmp_path_factory.mktemp("tiny") / "model"
    AutoModelForCausalLM.from_config(cfg).save_pretrained(str(path))
    return str(path)


def _learner(path, pack, attn="auto", **kw):
    cfg = LearnerConfig(
        device="cuda",
        bf16=True,
        pack=pack,
        attn_implementation=attn,
        micro_batch_size=3,
        actor_learning_rate=1e-2,
        lr_warmup_ratio=0.0,
        total_steps=10,
        **kw,
    )
    return TorchLearner(path, cfg, need_ref=False)


def _shared_batch():
    """Two prompts with 3 and 4 responses (LearnerConfig.share_prompts)."""
    g = torch.Generator().manual_seed(1)
    prompts, responses = [], []
    for p, rs in ((70, (5, 40, 12)), (9, (30, 1, 22, 8))):
        prompt = torch.randint(3, 256, (p,), generator=g).tolist()
        for r in rs:
            prompts.append(prompt)
            responses.append(torch.randint(3, 256, (r,), generator=g).tolist())
    return prompts, responses


def _logprobs_and_grads(learner, batch=None):
    prompts, responses = batch or _batch()
    mbs, _ = learner._micro(prompts, responses)
    net = learner._net("policy")
    for mb in mbs:
        learner._token_logprobs(net, mb)[0].sum().backward()
    grads = {n: w.grad.float().cpu().clone() for n, w in learner.master.named()}
    learner._zero_grad()
    return torch.cat(learner.logprobs(prompts, responses)), grads


def _assert_close(a, b):
    (lp_a, g_a), (lp_b, g_b) = a, b
    assert (lp_a - lp_b).abs().max() <= BF16_TOL
    for n in g_a:
        assert (g_a[n] - g_b[n]).abs().max() <= BF16_TOL * max(g_a[n].abs().max().item(), 1e-3), n


def test_auto_picks_flash_when_it_imports_else_sdpa(tiny_path):
    learner = _learner(tiny_path, True)
    want = "flash_attn_varlen_func" if _flash[0] else "SDPA per sequence"
    assert learner.packed and want in learner.attention, learner.attention


def test_packed_sdpa_equals_padded(tiny_path):
    _assert_close(
        _logprobs_and_grads(_learner(tiny_path, False, "sdpa")), _logprobs_and_grads(_learner(tiny_path, True, "sdpa"))
    )


@needs_flash
def test_packed_flash_varlen_equals_padded(tiny_path):
    flash = _learner(tiny_path, True, "flash_attention_2")
    assert "flash_attn_varlen_func" in flash.attention
    padded = _logprobs_and_grads(_learner(tiny_path, False, "sdpa"))
    _assert_close(padded, _logprobs_and_grads(flash))
    _assert_close(padded, _logprobs_and_grads(_learner(tiny_path, False, "flash_attention_2")))


@pytest.mark.parametrize("attn", ["sdpa", pytest.param("flash_attention_2", marks=needs_flash)])
def test_shared_prompts_equal_per_sequence(tiny_path, attn):
    """Each prompt once per row, its responses after it (SDPA per piece, or one flash-attn
    call with [prompt; own] keys and a bottom-right causal mask) against every sequence alone."""
    shared = _learner(tiny_path, True, attn, share_prompts=True)
    mbs, _ = shared._micro(*_shared_batch())
    assert all(mb.shared is not None for mb in mbs)
    _assert_close(
        _logprobs_and_grads(_learner(tiny_path, True, "sdpa"), _shared_batch()),
        _logprobs_and_grads(shared, _shared_batch()),
    )
