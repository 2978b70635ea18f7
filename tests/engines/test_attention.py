"""Which attention the learner runs (serl.engines.attention), and the flash-attn varlen
path's wiring checked on a CPU through a stand-in for ``flash_attn_varlen_func`` that
follows flash-attn's documented contract ([T, H, D] inputs, int32 ``cu_seqlens``, query
heads grouped onto key/value heads)."""

import logging
import sys
import types

import pytest
import torch
import torch.nn.functional as F

from serl.engines import learner_core, varlen
from serl.engines.attention import AttentionChoice, choose_attention, flash_attn_importable
from serl.engines.learner_core import LearnerConfig
from serl.engines.torch_learner import TorchLearner

PROMPTS = [[3, 4, 5], [6, 7], [8, 9, 10, 11, 12], [13], [14, 15, 16, 17]]
RESPONSES = [[20, 21], [22, 23, 24, 25, 26, 27], [28], [29, 30, 31], [32, 33, 34, 35, 36]]
BF16_TOL = 0.03  # as tests/engines/test_varlen.py: bf16 rounding between two kernels
HAVE, MISSING = (True, "flash-attn importable"), (False, "flash-attn not importable: ImportError")


# ------------------------------------------------------------------ the choice
@pytest.mark.parametrize(
    "device,requested,bf16,flash,load,packed",
    [
        ("cpu", "auto", False, HAVE, None, "auto"),  # CPU: today's path, whatever is installed
        ("cpu", "auto", True, HAVE, None, "auto"),
        ("cuda", "auto", True, HAVE, "flash_attention_2", "flash_attention_2"),
        ("cuda", "auto", True, MISSING, "sdpa", "sdpa"),
        ("cuda", "auto", False, HAVE, "sdpa", "sdpa"),  # fp32: flash-attn cannot compute it
        ("cuda", "sdpa", True, HAVE, "sdpa", "sdpa"),
        ("cuda", "eager", True, HAVE, "eager", "eager"),
        ("cpu", "eager", False, MISSING, "eager", "eager"),
        ("cpu", "sdpa", True, MISSING, "sdpa", "sdpa"),
        ("cuda", "flash_attention_2", True, HAVE, "flash_attention_2", "flash_attention_2"),
    ],
)
def test_choice(device, requested, bf16, flash, load, packed):
    c = choose_attention(device, requested, bf16, flash)
    assert (c.load, c.packed) == (load, packed)


@pytest.mark.parametrize(
    "device,bf16,flash,match",
    [
        ("cpu", True, HAVE, "needs a CUDA device"),
        ("cuda", False, HAVE, "bf16/fp16 only"),
        ("cuda", True, MISSING, "not importable"),
    ],
)
def test_forced_flash_that_cannot_run_is_refused(device, bf16, flash, match):
    with pytest.raises(ValueError, match=match):
        choose_attention(device, "flash_attention_2", bf16, flash)


def test_unknown_name_is_refused():
    with pytest.raises(ValueError, match="must be one of"):
        choose_attention("cpu", "flash_attention_3")
    with pytest.raises(ValueError, match="attn_implementation must be one of"):
        LearnerConfig(attn_implementation="flex")


def _fake_flash_module(calls: list) -> types.ModuleType:
    mod = types.ModuleType("flash_attn")

    def flash_attn_varlen_func(
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        dropout_p=0.0,
        softmax_scale=None,
        causal=False,
        **_,
    ):
        assert q.dim() == 3 and k.shape == v.shape and q.shape[0] == k.shape[0] and q.shape[2] == k.shape[2]
        assert q.dtype in (torch.float16, torch.bfloat16) and k.dtype == q.dtype and causal
        assert cu_seqlens_q.dtype == torch.int32 and torch.equal(cu_seqlens_q, cu_seqlens_k)
        assert int(cu_seqlens_q[-1]) == q.shape[0] and max_seqlen_q == int(cu_seqlens_q.diff().max())
        calls.append(cu_seqlens_q.tolist())
        group = q.shape[1] // k.shape[1]  # flash-attn: query head h reads key/value head h // group
        outs, cu = [], cu_seqlens_q.tolist()
        for a, b in zip(cu[:-1], cu[1:]):
            qs, ks, vs = (t[a:b].transpose(0, 1).float() for t in (q, k, v))
            ks, vs = ks.repeat_interleave(group, 0), vs.repeat_interleave(group, 0)
            o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=softmax_scale, dropout_p=dropout_p)
            outs.append(o.transpose(0, 1).to(q.dtype))
        return torch.cat(outs)

    mod.flash_attn_varlen_func = flash_attn_varlen_func
    return mod


def test_importability_is_what_an_import_says(monkeypatch):
    monkeypatch.setitem(sys.modules, "flash_attn", _fake_flash_module([]))
    assert flash_attn_importable()[0]
    assert choose_attention("cuda", "auto", True).packed == "flash_attention_2"
    monkeypatch.setitem(sys.modules, "flash_attn", None)  # import raises ImportError
    ok, why = flash_attn_importable()
    assert not ok and "not importable" in why
    assert choose_attention("cuda", "auto", True).packed == "sdpa"
    assert choose_attention("cpu", "auto", True).packed == "auto"


# ------------------------------------------------------------------ the flash varlen kernel's wiring
@pytest.mark.parametrize("lens,heads", [((3, 5, 1), (6, 2)), ((7,), (4, 4)), ((2, 9), (4, 1))])
def test_flash_varlen_equals_causal_attention_per_sequence(monkeypatch, lens, heads):
    calls = []
    monkeypatch.setitem(sys.modules, "flash_attn", _fake_flash_module(calls))
    h, hkv = heads
    g = torch.Generator().manual_seed(sum(lens))
    q, k, v = (torch.randn(1, n, sum(lens), 8, generator=g).to(torch.bfloat16) for n in (h, hkv, hkv))
    got, _ = varlen.varlen_attention(
        torch.nn.Module(), q, k, v, None, scaling=0.3, kernel="flash_attention_2", serl_seq_lens=lens
    )
    assert calls == [[0, *torch.tensor(lens).cumsum(0).tolist()]]  # one call for the whole row
    want = []
    for qs, ks, vs in zip(q.float().split(lens, 2), k.float().split(lens, 2), v.float().split(lens, 2)):
        o = F.scaled_dot_product_attention(
            qs, ks.repeat_interleave(h // hkv, 1), vs.repeat_interleave(h // hkv, 1), is_causal=True, scale=0.3
        )
        want.append(o.transpose(1, 2))
    want = torch.cat(want, 1)
    assert got.shape == (1, sum(lens), h, 8) and (got.float() - want).abs().max() <= 2e-2


def test_flash_varlen_refuses_fp32_outside_autocast(monkeypatch):
    monkeypatch.setitem(sys.modules, "flash_attn", _fake_flash_module([]))
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(RuntimeError, match="bf16/fp16"):
        varlen.varlen_attention(torch.nn.Module(), q, q, q, None, kernel="flash_attention_2", serl_seq_lens=(4,))


# ------------------------------------------------------------------ learners on a tiny model
@pytest.fixture(scope="module", params=["llama", "qwen2"])
def tiny_path(request, tmp_path_factory, save_tiny):
    from transformers import LlamaConfig, Qwen2Config

    config_cls = {"llama": LlamaConfig, "qwen2": Qwen2Config}[request.param]
    return save_tiny(tmp_path_factory.mktemp("tiny") / "model", config_cls)


def _learner(path, pack=True, **kw):
    cfg = LearnerConfig(
        actor_learning_rate=1e-2, lr_warmup_ratio=0.0, total_steps=10, micro_batch_size=3, pack=pack, **kw
    )
    return TorchLearner(path, cfg, need_ref=False)


def _logprobs_and_grads(learner):
    mbs, _ = learner._micro(PROMPTS, RESPONSES)
    net = learner._net("policy")
    for mb in mbs:
        learner._token_logprobs(net, mb)[0].sum().backward()
    weights = learner.master.named() if learner.master else learner.policy.named_parameters()
    grads = {n: w.grad.float().clone() for n, w in weights}
    learner._zero_grad()
    return torch.cat(learner.logprobs(PROMPTS, RESPONSES)), grads


def test_cpu_default_is_todays_packed_path_and_is_announced(tiny_path, caplog):
    with caplog.at_level(logging.INFO, logger="serl.engines.learner_core"):
        learner = _learner(tiny_path)
    assert learner.packed and learner.policy.config._attn_implementation == varlen.VARLEN
    assert "attention: packed micro-batches, grouped eager (short bf16) / SDPA per sequence (CPU)" in caplog.text


@pytest.mark.parametrize("kernel", ["eager", "sdpa"])
def test_forced_kernels_equal_padded_in_fp32(tiny_path, kernel):
    """Packed rows (positions restarting per sequence) through eager or SDPA attention give
    the padded path's log-probs and gradients in fp32."""
    forced = _learner(tiny_path, attn_implementation=kernel)
    assert forced.packed and forced.policy.config._attn_implementation == varlen.impl_name(kernel)
    (lp_a, g_a), (lp_b, g_b) = _logprobs_and_grads(_learner(tiny_path, pack=False)), _logprobs_and_grads(forced)
    assert (lp_a - lp_b).abs().max() <= 1e-5
    for n in g_a:
        assert (g_a[n] - g_b[n]).abs().max() <= 1e-5 * max(g_a[n].abs().max().item(), 1e-3), n


@pytest.mark.parametrize("mode", [dict(bf16=True), dict(bf16=True, bf16_weights=False)])  # bf16 weights, autocast
def test_flash_path_equals_padded(tiny_path, monkeypatch, caplog, mode):
    """The learner on the flash varlen path (flash-attn stood in for, choice forced as on
    CUDA) gives the padded path's log-probs and gradients to bf16 tolerance."""
    calls = []
    monkeypatch.setitem(sys.modules, "flash_attn", _fake_flash_module(calls))
    with monkeypatch.context() as m, caplog.at_level(logging.INFO, logger="serl.engines.learner_core"):
        m.setattr(learner_core, "choose_attention", lambda *a, **k: AttentionChoice(None, "flash_attention_2", "test"))
        flash = _learner(tiny_path, **mode)
    assert flash.packed and "flash_attn_varlen_func" in flash.attention and "flash_attn_varlen_func" in caplog.text
    padded = _learner(tiny_path, pack=False, **mode)
    (lp_a, g_a), (lp_b, g_b) = _logprobs_and_grads(padded), _logprobs_and_grads(flash)
    assert calls, "the flash kernel never ran"
    assert (lp_a - lp_b).abs().max() <= BF16_TOL
    for n in g_a:
        assert (g_a[n] - g_b[n]).abs().max() <= BF16_TOL * max(g_a[n].abs().max().item(), 1e-3), n
