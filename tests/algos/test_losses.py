import math
import re

import pytest
import torch

from serl.algos import dpo_loss, ppo_clip_loss


def _one_token(ratio, adv, eps_low=0.2, eps_high=0.2):
    logp = torch.tensor([[math.log(ratio)]], requires_grad=True)
    old = torch.zeros(1, 1)
    loss, metrics = ppo_clip_loss(logp, old, torch.tensor([[adv]]), torch.ones(1, 1), eps_low, eps_high)
    loss.backward()
    return loss.item(), logp.grad.item(), metrics


@pytest.mark.parametrize(
    "ratio,adv,loss,grad,clipped",
    [
        (1.1, 1.0, -1.1, -1.1, 0.0),  # inside the range: -ρA, d/dlogp = -ρA
        (1.5, 1.0, -1.2, 0.0, 1.0),  # above 1+ε with A>0: clipped, no gradient
        (0.5, -1.0, 0.8, 0.0, 1.0),  # below 1-ε with A<0: clipped, no gradient
        (1.5, -1.0, 1.5, 1.5, 0.0),  # above 1+ε with A<0: unclipped side wins
        (0.5, 1.0, -0.5, -0.5, 0.0),  # below 1-ε with A>0: unclipped side wins
        (0.9, -2.0, 1.8, 1.8, 0.0),  # inside, negative advantage
    ],
)
def test_ppo_clip_one_token(ratio, adv, loss, grad, clipped):
    got_loss, got_grad, m = _one_token(ratio, adv)
    assert got_loss == pytest.approx(loss, abs=1e-6)
    assert got_grad == pytest.approx(grad, abs=1e-6)
    assert m["clip_frac"] == clipped
    assert m["ratio"] == pytest.approx(ratio, rel=1e-6)


def test_ppo_clip_higher():
    # ρ=1.25, A=1: outside a symmetric 0.2 range, inside eps_high=0.28
    assert _one_token(1.25, 1.0, 0.2, 0.28)[0] == pytest.approx(-1.25)
    assert _one_token(1.25, 1.0, 0.2, 0.2)[0] == pytest.approx(-1.2)
    # the low side uses eps_low: ρ=0.75, A=-1 -> clipped at 0.8 only if eps_low=0.2
    assert _one_token(0.75, -1.0, 0.2, 0.28)[0] == pytest.approx(0.8)
    assert _one_token(0.75, -1.0, 0.3, 0.2)[0] == pytest.approx(0.75)


def test_clipped_tokens_carry_no_gradient_in_a_batch():
    ratio = torch.tensor([[1.5, 1.1, 0.5, 1.0]])
    adv = torch.tensor([[1.0, 1.0, -1.0, 2.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    logp = ratio.log().requires_grad_()
    loss, m = ppo_clip_loss(logp, torch.zeros(1, 4), adv, mask)
    loss.backward()
    # token mean over 3 tokens: d/dlogp = -ρA/3 where unclipped; 0 clipped and masked
    assert torch.allclose(logp.grad, torch.tensor([[0.0, -1.1 / 3, 0.0, 0.0]]), atol=1e-6)
    assert loss.item() == pytest.approx((-1.2 - 1.1 + 0.8) / 3, abs=1e-6)
    assert m["clip_frac"] == pytest.approx(2 / 3)


def test_aggregation_token_vs_seq_mean():
    # ratio 1 so the per-token loss is -A: row0 [2], row1 [1, 1, 1]
    adv = -torch.tensor([[2.0, 9.0, 9.0], [1.0, 1.0, 1.0]])
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    z = torch.zeros(2, 3)
    tok, _ = ppo_clip_loss(z, z, adv, mask, agg="token_mean")
    seq, _ = ppo_clip_loss(z, z, adv, mask, agg="seq_mean")
    assert tok.item() == pytest.approx(5 / 4)  # (2 + 3) / 4 tokens
    assert seq.item() == pytest.approx(3 / 2)  # (2/1 + 3/3) / 2 sequences
    drgrpo, _ = ppo_clip_loss(z, z, adv, mask, agg="seq_sum_const", const=4.0)
    assert drgrpo.item() == pytest.approx(5 / 8)  # (2/4 + 3/4) / 2 sequences (Dr.GRPO)


def test_seq_sum_const_gradient_ignores_length():
    # ratio 1, A = 1 on every token: d/dlogp = -A / (const * B) on each unmasked token,
    # the same for a 1-token and a 3-token sequence (token_mean would also give that,
    # seq_mean would give -1/2 and -1/6)
    logp = torch.zeros(2, 3, requires_grad=True)
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    loss, _ = ppo_clip_loss(logp, torch.zeros(2, 3), torch.ones(2, 3), mask, agg="seq_sum_const", const=8.0)
    loss.backward()
    assert torch.allclose(logp.grad, -mask / 16.0)
    with pytest.raises(ValueError, match="constant > 0"):
        ppo_clip_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1), agg="seq_sum_const")


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean", "seq_sum_const"])
def test_micro_batches_add_up_to_the_step(agg):
    g = torch.Generator().manual_seed(0)
    logp = torch.randn(4, 5, generator=g) * 0.1
    old = torch.randn(4, 5, generator=g) * 0.1
    adv = torch.randn(4, 5, generator=g)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]])
    whole, _ = ppo_clip_loss(logp, old, adv, mask, agg=agg, const=5.0)
    n_tok, n_seq = float(mask.sum()), 4.0
    parts = sum(
        ppo_clip_loss(logp[s], old[s], adv[s], mask[s], agg=agg, num_tokens=n_tok, num_seqs=n_seq, const=5.0)[0]
        for s in (slice(0, 1), slice(1, 4))
    )
    assert parts.item() == pytest.approx(whole.item(), rel=1e-6)


def test_ppo_bad_agg_and_shapes():
    z = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        ppo_clip_loss(z, z, z, z, agg="sum")
    with pytest.raises(ValueError, match="share one shape"):
        ppo_clip_loss(z, torch.zeros(1, 3), z, z)


def test_ppo_huge_log_ratio_stays_finite():
    loss, m = ppo_clip_loss(torch.tensor([[500.0]]), torch.zeros(1, 1), torch.tensor([[-1.0]]), torch.ones(1, 1))
    assert math.isfinite(loss.item()) and math.isfinite(m["approx_kl"])


def test_dpo_by_hand():
    # margins: (−1+1.5) − (−2+1.5) = 1 and −1; β=0.1 -> log(1+e^{∓0.1})
    pc = torch.tensor([-1.0, -2.0], requires_grad=True)
    pr = torch.tensor([-2.0, -1.0])
    ref = torch.tensor([-1.5, -1.5])
    loss, m = dpo_loss(pc, pr, ref, ref, beta=0.1)
    expected = (math.log1p(math.exp(-0.1)) + math.log1p(math.exp(0.1))) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert m["reward_accuracy"] == 0.5
    assert m["reward_chosen"] == pytest.approx((0.05 - 0.05) / 2)
    loss.backward()
    # d/dpc_i = -β σ(-z_i) / 2
    sig = lambda x: 1 / (1 + math.exp(-x))
    assert pc.grad.tolist() == pytest.approx([-0.1 * sig(-0.1) / 2, -0.1 * sig(0.1) / 2])


def test_dpo_label_smoothing():
    z = torch.zeros(1)
    loss, _ = dpo_loss(z + 1, z, z, z, beta=1.0, label_smoothing=0.25)
    expected = 0.75 * math.log1p(math.exp(-1)) + 0.25 * math.log1p(math.exp(1))
    assert loss.item() == pytest.approx(expected, rel=1e-6)


# Three pairs shared by the variant tests, β = 0.5.
#   pair  π_c   π_r   ref_c  ref_r   chosen ratio  rejected ratio   h     β·h
#   1     -1    -2    -1.5   -1.5        0.5          -0.5          1     0.5
#   2     -3    -1    -2     -2         -1             1           -2    -1
#   3      0    -4    -1     -1          1            -3            4     2
# sigmoid: log(1+e^{-β·h}) = 0.474077, 1.313262, 0.126928 -> mean 0.638089;
#   d/dπ_c = −β·σ(−β·h)/3 = −0.5·(0.377541, 0.731059, 0.119203)/3
#          = −0.062923, −0.121843, −0.019867
# cDPO ε=0.2: since log(1+e^{x}) = log(1+e^{−x}) + x, each loss is the sigmoid loss + ε·β·h:
#   0.574077, 1.113262, 0.526928 -> mean 0.638089 + 0.2·0.5 = 0.738089;
#   d/dπ_c = β·(ε − σ(−β·h))/3 = −0.029590, −0.088510, 0.013466
# hinge: relu(1 − β·h) = 0.5, 2, 0 -> mean 2.5/3 = 0.833333; d/dπ_c = −β/3 where active
#   = −1/6, −1/6, 0
# ipo: (h − 1/(2β))² = (h − 1)² = 0, 9, 9 -> mean 6; d/dπ_c = 2(h − 1)/3 = 0, −2, 2
PAIRS = dict(pc=[-1.0, -3.0, 0.0], pr=[-2.0, -1.0, -4.0], rc=[-1.5, -2.0, -1.0], rr=[-1.5, -2.0, -1.0])


@pytest.mark.parametrize(
    "loss_type,smoothing,loss,grad",
    [
        ("sigmoid", 0.0, 0.638089, [-0.062923, -0.121843, -0.019867]),
        ("sigmoid", 0.2, 0.738089, [-0.029590, -0.088510, 0.013466]),
        ("hinge", 0.0, 2.5 / 3, [-1 / 6, -1 / 6, 0.0]),
        ("ipo", 0.0, 6.0, [0.0, -2.0, 2.0]),
    ],
)
def test_dpo_variants_by_hand(loss_type, smoothing, loss, grad):
    pc = torch.tensor(PAIRS["pc"], requires_grad=True)
    pr = torch.tensor(PAIRS["pr"], requires_grad=True)
    got, m = dpo_loss(
        pc,
        pr,
        torch.tensor(PAIRS["rc"]),
        torch.tensor(PAIRS["rr"]),
        beta=0.5,
        label_smoothing=smoothing,
        loss_type=loss_type,
    )
    assert got.item() == pytest.approx(loss, abs=1e-6)
    got.backward()
    assert pc.grad.tolist() == pytest.approx(grad, abs=1e-6)
    # every variant depends on h only, so the rejected side gets the opposite gradient
    assert pr.grad.tolist() == pytest.approx([-g for g in grad], abs=1e-6)
    # metrics do not depend on the variant: β·ratios 0.25, −0.5, 0.5 vs −0.25, 0.5, −1.5
    assert m["reward_chosen"] == pytest.approx(0.25 / 3)
    assert m["reward_rejected"] == pytest.approx(-1.25 / 3)
    assert m["reward_accuracy"] == pytest.approx(2 / 3)
    assert m["reward_margin"] == pytest.approx(0.5)


def test_dpo_variants_are_exported():
    from serl.algos import DPO_LOSS_TYPES

    assert DPO_LOSS_TYPES == ("sigmoid", "hinge", "ipo")


def test_ipo_minimum_is_at_half_over_beta():
    # h = 1/(2β) = 2.5 for β=0.2 -> loss 0; h = 0 -> 2.5² = 6.25
    z = torch.zeros(1)
    assert dpo_loss(z + 2.5, z, z, z, beta=0.2, loss_type="ipo")[0].item() == pytest.approx(0.0)
    assert dpo_loss(z, z, z, z, beta=0.2, loss_type="ipo")[0].item() == pytest.approx(6.25)


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(beta=0.0), "beta must be > 0, got 0.0"),
        (dict(beta=-0.1), "beta must be > 0, got -0.1"),
        (dict(beta=float("nan")), "beta must be > 0, got nan"),
        (dict(loss_type="kto"), re.escape("unknown DPO loss type 'kto'; expected one of ('sigmoid', 'hinge', 'ipo')")),
        (dict(label_smoothing=0.5), r"label_smoothing must be in \[0, 0.5\), got 0.5"),
        (dict(label_smoothing=-0.1), r"label_smoothing must be in \[0, 0.5\), got -0.1"),
        (dict(label_smoothing=0.1, loss_type="ipo"), "applies only to loss type 'sigmoid', not 'ipo'"),
    ],
)
def test_dpo_bad_arguments(kwargs, needle):
    z = torch.zeros(2)
    with pytest.raises(ValueError, match=needle):
        dpo_loss(z, z, z, z, **kwargs)


def test_dpo_shape_mismatch():
    z = torch.zeros(2)
    with pytest.raises(ValueError, match="share one shape"):
        dpo_loss(z, torch.zeros(3), z, z)
