"""Blockwise token log-probs: values by hand, and equal to the full-size reference:
log-probs to 1e-5 and entropies to 5e-5 (fp32 sums over 1,000 logits in another order;
both are that close to fp64), gradients to 1e-6 in fp32 and to one bf16 rounding step
for bf16 logits."""

import math

import pytest
import torch

from serl.engines import token_logprobs as tl
from serl.engines.token_logprobs import reference_token_logprobs, token_logprobs


@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_two_token_vocabulary_by_hand(temperature):
    # logits [0, ln 3]: at T=1 the softmax is [1/4, 3/4]; at T=2 it is [1, sqrt 3] / (1 + sqrt 3)
    logits = torch.tensor([[0.0, math.log(3.0)], [0.0, math.log(3.0)]])
    targets = torch.tensor([1, 0])
    s = 3.0 ** (1.0 / temperature)
    p = [1 / (1 + s), s / (1 + s)]
    logp, ent = token_logprobs(logits, targets, temperature, want_entropy=True)
    assert logp.tolist() == pytest.approx([math.log(p[1]), math.log(p[0])], abs=1e-6)
    h = -(p[0] * math.log(p[0]) + p[1] * math.log(p[1]))
    assert ent.tolist() == pytest.approx([h, h], abs=1e-6)
    # d log p(y) / d z = (onehot(y) - softmax) / T
    z = logits.clone().requires_grad_(True)
    token_logprobs(z, targets, temperature)[0].sum().backward()
    want = torch.tensor([[-p[0], 1 - p[1]], [1 - p[0], -p[1]]]) / temperature
    assert torch.allclose(z.grad, want, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize(
    "rows", [1, tl.block_rows(1000), 2 * tl.block_rows(1000) + 22]
)  # one block, exactly one, a ragged third
def test_matches_the_full_size_reference(dtype, temperature, rows):
    g = torch.Generator().manual_seed(rows)
    logits = (3 * torch.randn(rows, 1000, generator=g)).to(dtype)
    targets = torch.randint(0, 1000, (rows,), generator=g)
    weights = torch.randn(rows, generator=g)
    got, want = [], []
    for fn, out in ((token_logprobs, got), (reference_token_logprobs, want)):
        z = logits.clone().requires_grad_(True)
        logp, ent = fn(z, targets, temperature, want_entropy=True)
        (logp * weights).sum().backward()
        out.extend([logp.detach(), ent, z.grad])
    assert got[0].dtype == torch.float32 and got[2].dtype == dtype
    assert torch.allclose(got[0], want[0], atol=1e-5) and torch.allclose(got[1], want[1], atol=5e-5)
    # both round the fp32 gradient to the logits' dtype once: equal up to that rounding
    grad_tol = 1e-6 if dtype == torch.float32 else 2**-8 * want[2].float().abs().max().item()
    assert torch.allclose(got[2].float(), want[2].float(), atol=grad_tol)


@pytest.mark.parametrize("vocab, rows", [(151_936, 6), (49_152, 21), (2**20, 1), (2**22, 1), (1000, 1048)])
def test_a_block_holds_about_a_million_logits(vocab, rows):
    assert tl.block_rows(vocab) == rows  # 2**20 // vocab, at least one row


def test_many_small_blocks_match_the_reference(monkeypatch):
    """Blocks of 3 rows over a ragged last block (the size a large vocabulary gets)."""
    monkeypatch.setattr(tl, "BLOCK_ELEMS", 3 * 1000)
    g = torch.Generator().manual_seed(7)
    logits = (3 * torch.randn(11, 1000, generator=g)).bfloat16()
    targets = torch.randint(0, 1000, (11,), generator=g)
    got, want = [], []
    for fn, out in ((token_logprobs, got), (reference_token_logprobs, want)):
        z = logits.clone().requires_grad_(True)
        logp, ent = fn(z, targets, 0.8, want_entropy=True)
        logp.sum().backward()
        out.extend([logp.detach(), ent, z.grad.float()])
    assert torch.allclose(got[0], want[0], atol=1e-5) and torch.allclose(got[1], want[1], atol=5e-5)
    assert torch.allclose(got[2], want[2], atol=2**-8 * want[2].abs().max().item())


def test_fp32_logits_are_not_modified_and_no_entropy_unless_asked():
    logits = torch.randn(5, 7, requires_grad=True)
    before = logits.detach().clone()
    logp, ent = token_logprobs(logits, torch.arange(5), temperature=0.5)
    logp.sum().backward()
    assert ent is None and torch.equal(logits.detach(), before)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match=r"logits \[N, V\] and targets \[N\]"):
        token_logprobs(torch.zeros(2, 3, 4), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"got \(2, 3\) and \(3,\)"):
        token_logprobs(torch.zeros(2, 3), torch.zeros(3, dtype=torch.long))
