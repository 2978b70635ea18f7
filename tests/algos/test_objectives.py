"""The learner objectives: DPO against numbers worked out by hand, and micro-batching
that leaves the step's loss and update unchanged (on a tiny random Llama)."""

import math

import pytest
import torch

from serl.algos import dpo_loss
from serl.algos.objectives import ObjectiveInput, get_objective
from serl.engines.base import TrainBatch
from serl.engines.learner_core import LearnerConfig

# Two pairs, per-token log-probs (0 = padding). Pair A: chosen 0, rejected 1; pair B: 2, 3.
LOGP = [[-1.0, -0.5], [-2.0, 0.0], [-0.3, -0.3], [-1.0, -1.0]]
REF = [[-1.2, -0.8], [-1.0, 0.0], [-0.1, -0.1], [-1.5, -0.9]]
MASK = [[1, 1], [1, 0], [1, 1], [1, 1]]
# log-ratios: A chosen -1.5 - -2.0 = 0.5, rejected -2 - -1 = -1  -> h_A = 1.5
#             B chosen -0.6 - -0.2 = -0.4, rejected -2 - -2.4 = 0.4 -> h_B = -0.8
BETA = 0.5
H = (1.5, -0.8)


def softplus(x):
    return math.log1p(math.exp(x))


HAND = {  # per-pair losses, by the formulas in serl.algos.losses.dpo_loss
    ("sigmoid", 0.0): [softplus(-BETA * h) for h in H],  # 0.38687, 0.91302
    ("sigmoid", 0.1): [0.9 * softplus(-BETA * h) + 0.1 * softplus(BETA * h) for h in H],
    ("hinge", 0.0): [0.25, 1.4],  # relu(1 - 0.75), relu(1 + 0.4)
    ("ipo", 0.0): [0.25, 3.24],  # (1.5 - 1)^2, (-0.8 - 1)^2
}


def _cfg(loss_type="sigmoid", smoothing=0.0, **kw):
    return LearnerConfig(
        objective="dpo", objective_args={"beta": BETA, "loss_type": loss_type, "label_smoothing": smoothing}, **kw
    )


def _inp(rows, pairs, num_pairs):
    t = lambda xs: torch.tensor([xs[i] for i in rows], dtype=torch.float32)  # noqa: E731
    return ObjectiveInput(
        logp=t(LOGP), mask=t(MASK).bool(), ref_logp=t(REF), pairs=torch.tensor(pairs), num_pairs=num_pairs
    )


@pytest.mark.parametrize("loss_type,smoothing", list(HAND))
def test_dpo_objective_by_hand(loss_type, smoothing):
    loss, sums = get_objective("dpo").fn(_inp([0, 1, 2, 3], [[0, 1], [2, 3]], 2.0), _cfg(loss_type, smoothing))
    assert loss.item() == pytest.approx(sum(HAND[loss_type, smoothing]) / 2, abs=1e-6)
    # metric sums over the two pairs (the learner divides by the step's pair count)
    assert sums["dpo/reward_chosen"] == pytest.approx(BETA * (0.5 - 0.4))
    assert sums["dpo/reward_rejected"] == pytest.approx(BETA * (-1.0 + 0.4))
    assert sums["dpo/margin"] == pytest.approx(BETA * (1.5 - 0.8))
    assert sums["dpo/accuracy"] == 1.0  # A right, B wrong
    assert sums["dpo/chosen_logp"] == pytest.approx(-0.75 - 0.3)  # per-token means
    assert sums["dpo/rejected_logp"] == pytest.approx(-2.0 - 1.0)


@pytest.mark.parametrize("loss_type,smoothing", list(HAND))
def test_dpo_objective_split_over_micro_batches_adds_up(loss_type, smoothing):
    cfg = _cfg(loss_type, smoothing)
    a, _ = get_objective("dpo").fn(_inp([0, 1], [[0, 1]], 2.0), cfg)
    b, _ = get_objective("dpo").fn(_inp([3, 2], [[1, 0]], 2.0), cfg)  # order inside a micro-batch is free
    assert a.item() + b.item() == pytest.approx(sum(HAND[loss_type, smoothing]) / 2, abs=1e-6)


def test_dpo_objective_refuses_unknown_settings():
    cfg = LearnerConfig(objective="dpo", objective_args={"beta": 0.1, "loss": "ipo"})
    with pytest.raises(ValueError, match="unknown objective_args"):
        get_objective("dpo").fn(_inp([0, 1], [[0, 1]], 1.0), cfg)


# ---- a real learner step on a tiny model -----------------------------------------------
PROMPTS = [[3, 4, 5], [3, 4, 5], [6, 7], [6, 7], [8, 9, 10, 11], [8, 9, 10, 11]]
RESPONSES = [[20, 21, 2], [22, 2], [23, 24, 25, 2], [26, 2], [27, 2], [28, 29, 30, 31, 2]]
PAIRS = [(0, 1), (2, 3), (5, 4)]


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo"])
def test_micro_batched_dpo_step_equals_the_unbatched_loss(tiny_path, loss_type):
    from serl.engines.torch_learner import TorchLearner

    runs = {}
    for micro in (2, 6):  # one pair per micro-batch vs all three pairs in one
        cfg = LearnerConfig(
            actor_learning_rate=1e-2,
            lr_warmup_ratio=0.0,
            total_steps=4,
            micro_batch_size=micro,
            objective="dpo",
            objective_args={"beta": 0.5, "loss_type": loss_type},
        )
        learner = TorchLearner(tiny_path, cfg, need_ref=False)
        pre = learner.logprobs(PROMPTS, RESPONSES)
        # a reference that differs from the policy, so the margins are not all 0
        ref = [t - 0.1 * (i % 2 + 1) for i, t in enumerate(pre)]
        seq, rseq = [float(t.sum()) for t in pre], [float(t.sum()) for t in ref]
        c, r = zip(*PAIRS)
        want, m = dpo_loss(
            torch.tensor([seq[i] for i in c]),
            torch.tensor([seq[i] for i in r]),
            torch.tensor([rseq[i] for i in c]),
            torch.tensor([rseq[i] for i in r]),
            beta=0.5,
            loss_type=loss_type,
        )
        got = learner.step(TrainBatch(PROMPTS, RESPONSES, ref_logprobs=ref, pairs=PAIRS))
        assert got["loss/policy"] == pytest.approx(want.item(), rel=1e-5, abs=1e-6)
        assert got["dpo/margin"] == pytest.approx(m["reward_margin"], abs=1e-5)
        assert got["dpo/accuracy"] == pytest.approx(m["reward_accuracy"])
        runs[micro] = (got, {n: w.clone() for n, w in learner.named_weights()})
    (m2, w2), (m6, w6) = runs[2], runs[6]
    assert m2["actor/grad_norm"] == pytest.approx(m6["actor/grad_norm"], rel=1e-4)
    # Adam divides by |g|: float noise on near-zero gradients shows at ~1e-6
    assert all(torch.allclose(w2[n], w6[n], atol=1e-4) for n in w2)
    start = TorchLearner(tiny_path, LearnerConfig(), need_ref=False)
    assert not all(torch.equal(w6[n], w) for n, w in start.named_weights())  # the step did move them


def test_ipo_uses_summed_log_ratios():
    # docs/algorithms.md: chosen has 4 tokens with log-ratio sum 2, rejected 2 tokens with sum -1,
    # beta 0.5. Summed (serl): h = 3, loss (3 - 1)^2 = 4. TRL's per-token means would give
    # h = 2/4 + 1/2 = 1 and loss 0.
    logp = torch.tensor([[-0.5] * 4, [-2.0, -2.0, 0.0, 0.0]])
    ref = torch.tensor([[-1.0] * 4, [-1.5, -1.5, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]).bool()
    inp = ObjectiveInput(logp=logp, mask=mask, ref_logp=ref, pairs=torch.tensor([[0, 1]]), num_pairs=1.0)
    loss, _ = get_objective("dpo").fn(inp, _cfg("ipo"))
    assert loss.item() == pytest.approx(4.0)
