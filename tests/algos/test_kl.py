import math

import pytest
import torch

from serl import ConfigError
from serl.algos import KL_CLIP, kl_estimate
from serl.algos.objectives import ObjectiveInput, get_objective
from serl.config.options import TrainConfig
from serl.config.parser import parse_args
from serl.engines.learner_core import LearnerConfig

LOGP = torch.tensor([0.0, -1.0, -2.0])
REF = torch.tensor([-0.5, -1.0, -1.0])  # Δ = [0.5, 0, -1]


@pytest.mark.parametrize(
    "kind,expected",
    [
        ("k1", [0.5, 0.0, -1.0]),
        ("k2", [0.125, 0.0, 0.5]),  # Δ²/2
        ("k3", [math.exp(-0.5) - 0.5, 0.0, math.e - 2.0]),  # e^{-Δ} - 1 + Δ
        ("low_var_kl", [math.exp(-0.5) - 0.5, 0.0, math.e - 2.0]),
    ],
)
def test_kl_by_hand(kind, expected):
    assert torch.allclose(kl_estimate(LOGP, REF, kind), torch.tensor(expected), atol=1e-6)


def _value_and_grad(kind, delta, clip):
    logp = torch.tensor([delta], dtype=torch.float32, requires_grad=True)
    out = kl_estimate(logp, torch.zeros(1), kind, clip=clip)
    out.sum().backward()
    return out.item(), logp.grad.item()


# (kind, Δ, uncapped value, its gradient d/dΔ), all by hand:
# k1 = Δ (grad 1); k2 = Δ²/2 (grad Δ); k3 = e^{-Δ} - 1 + Δ (grad 1 - e^{-Δ})
OUTSIDE = [
    ("k3", -5.0, math.exp(5) - 6.0, 1.0 - math.exp(5)),  # 142.413, -147.413 (issue 30)
    ("k2", 8.0, 32.0, 8.0),  # issue 30
    ("k2", -5.0, 12.5, -5.0),
    ("k1", 12.0, 12.0, 1.0),
    ("k1", -12.0, -12.0, 1.0),
    ("k3", 12.0, math.exp(-12) + 11.0, 1.0 - math.exp(-12)),  # 11.000006
]
INSIDE = [
    ("k1", -5.0, -5.0, 1.0),
    ("k2", 4.0, 8.0, 4.0),
    ("k3", -2.0, math.exp(2) - 3.0, 1.0 - math.exp(2)),  # 4.389056, -6.389056
    ("k3", 8.0, math.exp(-8) + 7.0, 1.0 - math.exp(-8)),  # 7.000335, 0.999665
]


@pytest.mark.parametrize("kind,delta,value,grad", OUTSIDE + INSIDE)
def test_uncapped_value_and_gradient_by_hand(kind, delta, value, grad):
    v, g = _value_and_grad(kind, delta, clip=1e6)  # a cap far away: the plain estimator
    assert v == pytest.approx(value, rel=1e-5) and g == pytest.approx(grad, rel=1e-5)


@pytest.mark.parametrize("kind,delta,value,grad", OUTSIDE)
def test_cap_bounds_the_outliers_and_stops_their_gradient(kind, delta, value, grad):
    v, g = _value_and_grad(kind, delta, clip=10.0)
    assert v == math.copysign(10.0, value) and g == 0.0


@pytest.mark.parametrize("kind,delta,value,grad", INSIDE)
def test_cap_leaves_values_inside_it_alone(kind, delta, value, grad):
    v, g = _value_and_grad(kind, delta, clip=10.0)
    assert v == pytest.approx(value, rel=1e-5) and g == pytest.approx(grad, rel=1e-5)


@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
@pytest.mark.parametrize("delta", [-200.0, 200.0])
def test_far_outliers_stay_finite(kind, delta):
    v, g = _value_and_grad(kind, delta, clip=10.0)  # e^{200} overflows float32 without the bound
    assert abs(v) == 10.0 and g == 0.0


def test_small_cap_k3_bound_before_exp_changes_nothing():
    # clip 0.5: k3 bounds Δ at -log(3) = -1.0986 before e^{-Δ}; k3(-0.8) = e^0.8 - 1.8 = 0.425541 is
    # inside the cap, k3(-0.9) = 0.559603 and k3(-3) = 17.09 are capped
    logp = torch.tensor([-0.8, -0.9, -3.0], requires_grad=True)
    out = kl_estimate(logp, torch.zeros(3), "k3", clip=0.5)
    out.sum().backward()
    assert out.tolist() == pytest.approx([math.exp(0.8) - 1.8, 0.5, 0.5], rel=1e-6)
    assert logp.grad.tolist() == pytest.approx([1.0 - math.exp(0.8), 0.0, 0.0], rel=1e-6)


@pytest.mark.parametrize("clip", [0.0, -1.0, math.inf, math.nan])
def test_bad_cap_is_refused(clip):
    with pytest.raises(ValueError, match="KL cap must be a positive finite number"):
        kl_estimate(LOGP, REF, "k3", clip=clip)
    with pytest.raises(ValueError, match="LearnerConfig.kl_clip"):
        LearnerConfig(kl_clip=clip)
    with pytest.raises(ConfigError, match="kl_clip"):
        TrainConfig(kl_clip=clip).validate()


def test_kl_unknown_kind():
    with pytest.raises(ValueError, match="unknown KL estimator 'k4'"):
        kl_estimate(LOGP, REF, "k4")


def test_one_default_cap_everywhere():
    assert TrainConfig().kl_clip == LearnerConfig().kl_clip == KL_CLIP


def test_kl_clip_option_reaches_the_learner():
    from serl.config.plan import plan_run
    from serl.engines.factory import learner_config

    cfg, _ = parse_args(["--use_kl_loss", "--init_kl_coef", "0.1", "--kl_clip", "3"])
    assert learner_config(cfg, plan_run(cfg)).kl_clip == 3.0


def test_ppo_clip_loss_reads_the_cap():
    # one sequence, Δ = [-5, -2], zero advantages: only the k3 KL term moves the loss.
    # capped k3 = [10, e^2 - 3]; token mean over 2 tokens; gradient 0.1 * [0, 1 - e^2] / 2
    logp = torch.tensor([[-5.0, -2.0]], requires_grad=True)
    inp = ObjectiveInput(
        logp=logp,
        mask=torch.ones(1, 2, dtype=torch.bool),
        advantages=torch.zeros(1, 2),
        ref_logp=torch.zeros(1, 2),
        num_tokens=2.0,
        num_seqs=1.0,
    )
    cfg = LearnerConfig(kl_loss_coef=0.1, kl_estimator="k3", kl_clip=10.0)
    loss, sums = get_objective("ppo_clip").fn(inp, cfg)
    loss.backward()
    assert sums["loss/kl"] == pytest.approx((10.0 + math.exp(2) - 3.0) / 2, rel=1e-6)
    assert sums["actor/kl_capped"] == 1.0  # one token at the cap (a share once divided by tokens)
    assert logp.grad[0].tolist() == pytest.approx([0.0, 0.1 * (1.0 - math.exp(2)) / 2], rel=1e-6)
