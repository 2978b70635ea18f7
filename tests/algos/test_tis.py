"""Truncated importance sampling: the weights and their effect on the loss, worked out by hand.

Four tokens, advantage 1, the learner's log-probs equal the old ones (first step on a batch):
  old        -1.0   -0.5    -0.1   -2.0
  behaviour  -1.0   -1.0    -2.0    NaN (not sampled by the generator: weight 1)
  exp(old - behaviour) = 1, e^0.5 = 1.64872, e^1.9 = 6.68589, 1
With cap 2 the third is capped to 2; with cap 10 nothing is; without correction every weight is 1.
pg, token mean: loss = mean(-logp * w); ppo_clip at ratio 1: loss = mean(-w).
"""

import math

import pytest
import torch

from serl.algos.objectives import ObjectiveInput, get_objective
from serl.algos.tis import tis_weights
from serl.engines.learner_core import LearnerConfig

OLD = torch.tensor([[-1.0, -0.5, -0.1, -2.0]])
BEHAVIOUR = torch.tensor([[-1.0, -1.0, -2.0, float("nan")]])
E05, E19 = math.exp(0.5), math.exp(1.9)

CASES = {  # name: (is_cap, weights)
    "cap hit": (2.0, [1.0, E05, 2.0, 1.0]),
    "cap not hit": (10.0, [1.0, E05, E19, 1.0]),
    "correction off": (0.0, [1.0, 1.0, 1.0, 1.0]),
}


def _run(objective, cap):
    logp = OLD.clone().requires_grad_(True)
    inp = ObjectiveInput(
        logp,
        torch.ones_like(OLD, dtype=torch.bool),
        torch.ones_like(OLD),
        None,
        None,
        behaviour_logp=BEHAVIOUR,
        num_tokens=4.0,
        num_seqs=1.0,
    )
    loss, sums = get_objective(objective).fn(inp, LearnerConfig(is_cap=cap, objective=objective))
    loss.backward()
    return loss.item(), logp.grad[0].tolist(), sums


@pytest.mark.parametrize("case", list(CASES))
def test_pg_loss_and_gradient(case):
    cap, w = CASES[case]
    loss, grad, sums = _run("pg", cap)
    expected = (1.0 * w[0] + 0.5 * w[1] + 0.1 * w[2] + 2.0 * w[3]) / 4
    assert loss == pytest.approx(expected, rel=1e-5)
    assert {"cap hit": 1.00609, "cap not hit": 1.12324, "correction off": 0.9}[case] == pytest.approx(
        expected, abs=1e-5
    )
    assert grad == pytest.approx([-x / 4 for x in w], rel=1e-5)  # d/dlogp of -logp*w/4, w detached
    if cap:
        assert sums["actor/is_weight_mean"] == pytest.approx(sum(w), rel=1e-5)  # a sum; the learner divides
        assert sums["actor/is_capped_frac"] == (1.0 if case == "cap hit" else 0.0)
        assert sums["actor/is_weight_max"] == pytest.approx(max(w), rel=1e-5)
    else:
        assert not any(k.startswith("actor/is_") for k in sums)


@pytest.mark.parametrize("case", list(CASES))
def test_ppo_clip_loss_and_gradient(case):
    cap, w = CASES[case]
    loss, grad, _ = _run("ppo_clip", cap)
    assert loss == pytest.approx(-sum(w) / 4, rel=1e-5)  # ratio 1: -min(1*A, clip(1)*A) * w
    # d/dlogp of -exp(logp - old) * w / 4 at logp = old: -w / 4
    assert grad == pytest.approx([-x / 4 for x in w], rel=1e-5)


def test_weights_are_detached_and_capped():
    old = torch.tensor([0.0, -3.0], requires_grad=True)
    w = tis_weights(old, torch.tensor([-5.0, -1.0]), 2.0)
    assert not w.requires_grad
    assert w.tolist() == pytest.approx([2.0, math.exp(-2.0)])  # e^5 capped; e^-2 kept (no lower clamp)


PROMPTS = [[3, 4, 5], [6, 7], [8, 9, 10, 11, 12], [6, 7]]
RESPONSES = [[20, 21], [22, 23, 24, 25, 26], [27], [28, 29, 30, 31]]  # 12 tokens


@pytest.mark.parametrize("micro", [1, 4])
def test_the_learner_weights_each_token_by_its_own_ratio(tiny_path, micro):
    """Through the learner (padding, micro-batches, the metrics' division by the step's tokens):
    behaviour = learner log-prob - log r, so exp(old - behaviour) = r. Token by token, r cycles
    through 0.5, 1.5, 4 (capped to 2) and unknown (NaN: 1), so the 12 tokens' weights are
    [0.5, 1.5, 2, 1] x 3: mean 5/4, a quarter at the cap, max 2. pg, token mean:
    loss = -sum(A * logp * w) / 12."""
    from serl.engines.base import TrainBatch
    from serl.engines.torch_learner import TorchLearner

    cfg = LearnerConfig(
        actor_learning_rate=1e-2,
        lr_warmup_ratio=0.0,
        total_steps=10,
        micro_batch_size=micro,
        max_norm=0.0,
        objective="pg",
        is_cap=2.0,
    )
    learner = TorchLearner(tiny_path, cfg, need_ref=False)
    lp = learner.logprobs(PROMPTS, RESPONSES)
    ratios, weights = [0.5, 1.5, 4.0, float("nan")], [0.5, 1.5, 2.0, 1.0]
    k, behaviour, w = 0, [], []
    for t in lp:
        r = torch.tensor([ratios[(k + j) % 4] for j in range(len(t))])
        w.append(torch.tensor([weights[(k + j) % 4] for j in range(len(t))]))
        behaviour.append(t - torch.log(r))  # NaN where r is NaN
        k += len(t)
    adv = [torch.full((len(t),), float(i) - 1.5) for i, t in enumerate(lp)]
    want = -sum(float((a * ln * x).sum()) for a, ln, x in zip(adv, lp, w)) / 12
    m = learner.step(TrainBatch(PROMPTS, RESPONSES, adv, behaviour_logprobs=behaviour))
    assert m["loss/policy"] == pytest.approx(want, rel=1e-5)
    assert m["actor/is_weight_mean"] == pytest.approx(1.25, rel=1e-5)
    assert m["actor/is_capped_frac"] == pytest.approx(0.25)
    assert m["actor/is_weight_max"] == pytest.approx(2.0)
