"""Packed sequences: attention stays inside each sequence, and packed log-probs and
gradients equal padded ones (fp32: log-probs to 1e-5, gradients to 1e-5 of their
largest entry; bf16: to the bf16 noise between two attention kernels, see ``BF16_TOL``)."""

import logging

import pytest
import torch
import torch.nn.functional as F

from serl.engines import varlen
from serl.engines.learner_core import LearnerConfig, Scorer
from serl.engines.torch_learner import TorchLearner

PROMPTS = [[3, 4, 5], [6, 7], [8, 9, 10, 11, 12], [13], [14, 15, 16, 17]]
RESPONSES = [[20, 21], [22, 23, 24, 25, 26, 27], [28], [29, 30, 31], [32, 33, 34, 35, 36]]
MODES = {"fp32": dict(), "bf16_autocast": dict(bf16=True, bf16_weights=False), "bf16_weights": dict(bf16=True)}
BF16_TOL = 0.03  # bf16 log-probs of two layouts/kernels differ by rounding, ~1e-2 here


def _learner(path, pack, **kw):
    base = dict(actor_learning_rate=1e-2, lr_warmup_ratio=0.0, total_steps=10, micro_batch_size=3)
    return TorchLearner(path, LearnerConfig(**{**base, **kw}, pack=pack), need_ref=False)


def _logprobs_and_grads(learner):
    """Log-probs of every response token and the gradient of their sum (layout-free)."""
    mbs, _ = learner._micro(PROMPTS, RESPONSES)
    net = learner._net("policy")
    for mb in mbs:
        learner._token_logprobs(net, mb)[0].sum().backward()
    weights = learner.master.named() if learner.master else learner.policy.named_parameters()
    grads = {n: w.grad.float().clone() for n, w in weights}
    learner._zero_grad()
    return torch.cat(learner.logprobs(PROMPTS, RESPONSES)), grads


@pytest.mark.parametrize("eager_max", [0, 4, 10_000])  # SDPA only, both, grouped eager only (bf16)
@pytest.mark.parametrize("mode", list(MODES))
def test_packed_equals_padded(tiny_path, monkeypatch, mode, eager_max):
    monkeypatch.setattr(varlen, "EAGER_MAX_LEN", eager_max)
    padded, packed = _learner(tiny_path, False, **MODES[mode]), _learner(tiny_path, True, **MODES[mode])
    assert packed.packed and not padded.packed
    (lp_a, g_a), (lp_b, g_b) = _logprobs_and_grads(padded), _logprobs_and_grads(packed)
    tol = 1e-5 if mode == "fp32" else BF16_TOL
    assert (lp_a - lp_b).abs().max() <= tol
    for n in g_a:
        scale = g_a[n].abs().max().item()
        assert (g_a[n] - g_b[n]).abs().max() <= tol * max(scale, 1e-3), n


def test_a_sequence_does_not_see_its_neighbour(tiny_path):
    learner = _learner(tiny_path, True, micro_batch_size=2)
    # sequence 0 is the longer, so it comes first in the packed row, before sequence 1
    prompts, responses = [[3, 4, 5, 6, 7, 8], [9, 10]], [[20, 21, 22], [23, 24]]
    alone = learner.logprobs(prompts[1:], responses[1:])[0]
    for neighbour in ([3, 4, 5, 6, 7, 8], [40, 41, 42, 43, 44, 45]):
        got = learner.logprobs([neighbour, prompts[1]], responses)[1]
        assert torch.allclose(got, alone, atol=1e-6)


@pytest.mark.parametrize("n,heads", [(1, (4, 2)), (5, (4, 4)), (17, (6, 2))])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.bfloat16, 3e-2)])
def test_grouped_eager_equals_causal_sdpa(n, heads, dtype, tol):
    h, hkv = heads
    g = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(1, hh, n, 8, generator=g) for hh in (h, hkv, hkv))
    want = F.scaled_dot_product_attention(
        q, k.repeat_interleave(h // hkv, 1), v.repeat_interleave(h // hkv, 1), is_causal=True, scale=0.3
    ).transpose(1, 2)
    got = varlen._grouped_eager(q.to(dtype), k.to(dtype), v.to(dtype), 0.3)
    assert got.shape == (1, n, h, 8) and (got.float() - want).abs().max() <= tol


def test_sliding_window_shorter_than_a_sequence_is_refused(tmp_path_factory, save_tiny):
    from transformers import MistralConfig

    path = save_tiny(tmp_path_factory.mktemp("tiny") / "model", MistralConfig, sliding_window=4)
    learner = _learner(path, True)
    assert learner.packed
    learner.logprobs([[3, 4]], [[5]])  # 3 tokens: inside the window
    with pytest.raises(ValueError, match="exceeds the model's sliding window"):
        learner.logprobs(PROMPTS, RESPONSES)


def test_a_model_that_bypasses_the_attention_is_an_error():
    class Bypass(torch.nn.Module):
        def forward(self, **kwargs):
            return kwargs["input_ids"]

    with pytest.raises(RuntimeError, match="ran without serl_varlen attention"):
        varlen.packed_forward(Bypass(), torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 3), (3,))


def test_a_model_without_pluggable_attention_falls_back_to_padding(caplog):
    class Fixed(torch.nn.Module):
        config = type("Config", (), {"_attn_implementation": "eager"})()

        def _can_set_attn_implementation(self):
            return False

    with caplog.at_level(logging.WARNING):
        assert not Scorer(Fixed(), pack=True).packed
    assert "sequence packing off" in caplog.text and "does not take pluggable attention" in caplog.text


# ------------------------------------------------------------------ SmolLM2
@pytest.mark.slow
def test_smollm2_new_path_matches_the_old(smol_path, smol_tokenizer):
    """Real text on the embedded model: packed fp32 equals padded fp32 to 1e-4; the bf16
    default (packed, bf16 weights, eager short attention) stays within 0.15 of fp32
    (bf16 rounding of a 30-layer model; the old bf16 autocast path is as far)."""
    tok = smol_tokenizer
    prompts = [tok.encode("What is 12 times 7?"), tok.encode("Name three colours of the rainbow:")]
    responses = [tok.encode(" 12 times 7 is 84."), tok.encode(" Red, orange and yellow.")]
    lp = {}
    for name, kw in (
        ("old_fp32", dict(pack=False, fused_logprobs=False)),
        ("new_fp32", {}),
        ("old_bf16", dict(bf16=True, bf16_weights=False, pack=False, fused_logprobs=False)),
        ("new_bf16", dict(bf16=True)),
    ):
        learner = TorchLearner(smol_path, LearnerConfig(micro_batch_size=2, **kw), need_ref=False)
        lp[name] = torch.cat(learner.logprobs(prompts, responses))
        del learner
    assert (lp["new_fp32"] - lp["old_fp32"]).abs().max() <= 1e-4
    err_new = (lp["new_bf16"] - lp["old_fp32"]).abs().max().item()
    err_old = (lp["old_bf16"] - lp["old_fp32"]).abs().max().item()
    assert err_new <= 0.15 and err_old <= 0.15, (err_new, err_old)


def test_ordinary_calls_of_the_switched_model_stay_plain_sdpa(tiny_path):
    """Calling the learner's policy directly (left padding, a mask) gives what an SDPA
    model gives; packed position ids without the lengths are refused."""
    from transformers import AutoModelForCausalLM

    learner = _learner(tiny_path, True)
    assert learner.policy.config._attn_implementation == varlen.VARLEN
    plain = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32, attn_implementation="sdpa")
    ids = torch.tensor([[0, 0, 5, 6, 7], [3, 4, 5, 6, 7]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    with torch.no_grad():
        got, want = learner.policy(ids, attention_mask=mask).logits, plain(ids, attention_mask=mask).logits
    assert torch.allclose(got[mask.bool()], want[mask.bool()], atol=1e-5)
    with pytest.raises(RuntimeError, match="packed position_ids without serl_seq_lens"):
        learner.policy(ids[1:], position_ids=torch.tensor([[0, 1, 0, 1, 2]]))


# ------------------------------------------------------------------ shared prompts (attention alone)
# three blocks: a 3-token prompt with responses of 2, 1 and 4 tokens; 5 with 3; 2 with none
SHARED = ((3, (2, 1, 4)), (5, (3,)), (2, ()))
SHARED_LENS = (10, 8, 2)


class _Attn(torch.nn.Module):
    """What transformers' SDPA path reads off an attention module."""

    def __init__(self, h, hkv):
        super().__init__()
        self.num_key_value_groups = h // hkv


def _qkv(h, hkv, dtype, t=20, d=8):
    g = torch.Generator().manual_seed(7)
    return [torch.randn(1, n, t, d, generator=g).to(dtype).requires_grad_() for n in (h, hkv, hkv)]


def _each_sequence_alone(q, k, v, shared, scale=0.3):
    """Every (prompt, response) sequence on its own through causal fp32 SDPA, its outputs
    put back at the row's columns: what the shared row must equal. [1, T, H, D]."""
    group = q.shape[1] // k.shape[1]
    q, k, v = q.float(), k.float().repeat_interleave(group, 1), v.float().repeat_interleave(group, 1)
    out = [None] * q.shape[2]
    start = 0
    for p, rs in shared:
        seqs, at = [list(range(start, start + p))], start + p
        for r in rs:
            seqs.append(list(range(start, start + p)) + list(range(at, at + r)))
            at += r
        for n, cols in enumerate(seqs):
            o = F.scaled_dot_product_attention(
                q[:, :, cols], k[:, :, cols], v[:, :, cols], is_causal=True, scale=scale
            )[0].transpose(0, 1)
            mine = cols if n == 0 else cols[p:]  # the prompt's outputs come from its own piece
            for j, c in enumerate(mine):
                out[c] = o[len(cols) - len(mine) + j]
        start = at
    return torch.stack(out).unsqueeze(0)


@pytest.mark.parametrize("kernel,eager_max", [("eager", 512), ("sdpa", 512), ("auto", 4)])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_shared_prompt_attention_equals_each_sequence_alone(monkeypatch, kernel, eager_max, dtype, tol):
    """Outputs, and gradients into q, k, v (a prompt's keys collect those of all its responses)."""
    monkeypatch.setattr(varlen, "EAGER_MAX_LEN", eager_max)  # auto at 4: eager for short pieces, else SDPA
    h, hkv = 4, 2
    q, k, v = _qkv(h, hkv, dtype)
    got, _ = varlen.varlen_attention(
        _Attn(h, hkv), q, k, v, None, scaling=0.3, kernel=kernel, serl_seq_lens=SHARED_LENS, serl_shared=SHARED
    )
    q2, k2, v2 = (t.detach().float().requires_grad_() for t in (q, k, v))
    want = _each_sequence_alone(q2, k2, v2, SHARED)
    assert got.shape == want.shape == (1, 20, h, 8) and (got.float() - want).abs().max() <= tol
    w = torch.randn(want.shape, generator=torch.Generator().manual_seed(1))
    (got.float() * w).sum().backward()
    (want * w).sum().backward()
    for a, b in ((q, q2), (k, k2), (v, v2)):
        assert (a.grad.float() - b.grad).abs().max() <= tol * max(1.0, b.grad.abs().max().item())


def _bottom_right_flash(calls: list):
    """A stand-in for flash-attn's ``flash_attn_varlen_func`` (>= 2.1): query and key pieces of
    different lengths, the causal mask of each aligned to the bottom-right corner."""
    import types

    def flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, dropout_p=0.0, softmax_scale=None, causal=False, **_):
        assert causal and q.dtype == k.dtype == torch.bfloat16 and cu_q.dtype == cu_k.dtype == torch.int32
        assert max_q == int(cu_q.diff().max()) and max_k == int(cu_k.diff().max())
        calls.append((cu_q.tolist(), cu_k.tolist()))
        group, outs = q.shape[1] // k.shape[1], []
        for a, b, c, d in zip(cu_q[:-1].tolist(), cu_q[1:].tolist(), cu_k[:-1].tolist(), cu_k[1:].tolist()):
            qs, ks, vs = q[a:b].transpose(0, 1).float(), k[c:d].transpose(0, 1).float(), v[c:d].transpose(0, 1).float()
            allowed = torch.ones(b - a, d - c, dtype=torch.bool).tril_((d - c) - (b - a))
            o = F.scaled_dot_product_attention(
                qs,
                ks.repeat_interleave(group, 0),
                vs.repeat_interleave(group, 0),
                attn_mask=allowed,
                scale=softmax_scale,
            )
            outs.append(o.transpose(0, 1).to(q.dtype))
        return torch.cat(outs)

    return types.SimpleNamespace(flash_attn_varlen_func=flash_attn_varlen_func)


def test_shared_prompt_flash_path_gathers_prompt_keys(monkeypatch):
    import sys

    calls = []
    monkeypatch.setitem(sys.modules, "flash_attn", _bottom_right_flash(calls))
    q, k, v = _qkv(4, 2, torch.bfloat16)
    got, _ = varlen.varlen_attention(
        torch.nn.Module(),
        q,
        k,
        v,
        None,
        scaling=0.3,
        kernel="flash_attention_2",
        serl_seq_lens=SHARED_LENS,
        serl_shared=SHARED,
    )
    # queries: the pieces as laid out (3, 2, 1, 4 | 5, 3 | 2); keys: each response after
    # its prompt (3, 3+2, 3+1, 3+4 | 5, 5+3 | 2): one call for the whole row
    assert calls == [([0, 3, 5, 6, 10, 15, 18, 20], [0, 3, 8, 12, 19, 24, 32, 34])]
    keys = varlen._shared_index(SHARED, "cpu")[0].tolist()
    assert keys == [
        0,
        1,
        2,
        0,
        1,
        2,
        3,
        4,
        0,
        1,
        2,
        5,
        0,
        1,
        2,
        6,
        7,
        8,
        9,
        10,
        11,
        12,
        13,
        14,
        10,
        11,
        12,
        13,
        14,
        15,
        16,
        17,
        18,
        19,
    ]
    want = _each_sequence_alone(q.detach(), k.detach(), v.detach(), SHARED)
    assert (got.float() - want).abs().max() <= 3e-2


def test_shared_prompt_window_is_prompt_plus_one_response():
    q, k, v = _qkv(2, 2, torch.float32, t=6)
    # a block of 6 tokens, but no query sees more than 2 + 2
    varlen.varlen_attention(
        _Attn(2, 2), q, k, v, None, serl_seq_lens=(6,), serl_shared=((2, (2, 2)),), sliding_window=4
    )
    with pytest.raises(ValueError, match="a sequence of 5 tokens exceeds"):
        varlen.varlen_attention(
            _Attn(2, 2), q, k, v, None, serl_seq_lens=(6,), serl_shared=((2, (3, 1)),), sliding_window=4
        )


def test_shared_blocks_must_add_up_to_the_row():
    class Bypass(torch.nn.Module):
        def forward(self, **kwargs):
            return kwargs["input_ids"]

    with pytest.raises(ValueError, match="do not add up"):
        varlen.packed_forward(
            Bypass(), torch.zeros(1, 5, dtype=torch.long), torch.zeros(1, 5), (5,), shared=((2, (2,)),)
        )
