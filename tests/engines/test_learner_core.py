"""The shared learner core: objectives by name (DPO, plain PG) against numbers worked out
from log-probs, pair-preserving micro-batches, and the reference refresh."""
import math

import pytest
import torch
import torch.nn.functional as F

from serl.engines.base import TrainBatch
from serl.engines.learner_core import LearnerConfig, micro_batches
from serl.engines.torch_learner import TorchLearner

PROMPTS = [[3, 4, 5], [3, 4, 5], [6, 7], [6, 7], [8, 9, 10, 11, 12], [8, 9, 10, 11, 12]]
RESPONSES = [[20, 21], [22, 23, 24, 25], [26], [27, 28, 29], [30, 31, 32], [33]]
PAIRS = [(0, 1), (3, 2), (4, 5)]  # (chosen, rejected)


def _learner(path, **kw):
    base = dict(lr=1e-2, warmup_ratio=0.0, total_steps=10, micro_batch_size=2, max_grad_norm=0.0)
    base.update(kw)
    return TorchLearner(path, LearnerConfig(**base), need_ref=kw.pop("need_ref", False))


def test_pairs_stay_in_one_micro_batch():
    mbs = micro_batches(PROMPTS, RESPONSES, size=3, pad_id=0, units=[list(p) for p in PAIRS])
    for mb in mbs:
        assert len(mb.index) % 2 == 0 and mb.pairs is not None
        got = {(mb.index[c], mb.index[r]) for c, r in mb.pairs.tolist()}
        assert got <= set(PAIRS)
    assert sorted(i for mb in mbs for i in mb.index) == list(range(6))


@pytest.mark.parametrize("loss_type,ls", [("sigmoid", 0.0), ("sigmoid", 0.1), ("hinge", 0.0), ("ipo", 0.0)])
def test_dpo_step_loss_matches_the_formula_and_micro_batching(tiny_path, loss_type, ls):
    beta = 0.5
    args = {"beta": beta, "loss_type": loss_type, "label_smoothing": ls}
    a = _learner(tiny_path, objective="dpo", objective_args=args, micro_batch_size=2)
    b = _learner(tiny_path, objective="dpo", objective_args=args, micro_batch_size=6)
    lp = a.logprobs(PROMPTS, RESPONSES)
    # a reference that differs from the policy: ref = policy log-probs shifted per sequence
    ref = [t + 0.3 * (i % 3) for i, t in enumerate(lp)]
    seq, rseq = [float(t.sum()) for t in lp], [float(t.sum()) for t in ref]
    want = []
    for c, r in PAIRS:
        z = beta * ((seq[c] - rseq[c]) - (seq[r] - rseq[r]))
        if loss_type == "sigmoid":
            want.append(-(1 - ls) * math.log(1 / (1 + math.exp(-z))) - ls * math.log(1 / (1 + math.exp(z))))
        elif loss_type == "hinge":
            want.append(max(0.0, 1 - z))
        else:  # ipo: (logits - 1/(2 beta))^2 with logits = z / beta
            want.append((z / beta - 1 / (2 * beta)) ** 2)
    batch = TrainBatch(PROMPTS, RESPONSES, ref_logprobs=ref, pairs=PAIRS)
    ma, mb_ = a.step(batch), b.step(batch)
    assert ma["loss/policy"] == pytest.approx(sum(want) / len(want), rel=1e-4)
    assert mb_["loss/policy"] == pytest.approx(ma["loss/policy"], rel=1e-5)
    assert ma["dpo/accuracy"] == pytest.approx(
        sum((seq[c] - rseq[c]) > (seq[r] - rseq[r]) for c, r in PAIRS) / 3)
    wa, wb = dict(a.named_weights()), dict(b.named_weights())
    for n in wa:  # the same update whatever the micro-batch size (Adam moves by ~lr = 1e-2:
        # a 1e-5 difference is rounding in a near-zero gradient that Adam normalises)
        torch.testing.assert_close(wa[n], wb[n], rtol=1e-4, atol=1e-5)


def test_dpo_raises_chosen_over_rejected(tiny_path):
    ln = _learner(tiny_path, objective="dpo", objective_args={"beta": 0.1})
    ref = ln.logprobs(PROMPTS, RESPONSES)
    batch = TrainBatch(PROMPTS, RESPONSES, ref_logprobs=ref, pairs=PAIRS)
    first = ln.step(batch)
    for _ in range(5):
        last = ln.step(batch)
    assert first["dpo/margin"] == pytest.approx(0.0, abs=1e-6)  # policy == reference at the start
    assert last["dpo/margin"] > 0 and last["dpo/accuracy"] == 1.0 and last["loss/policy"] < first["loss/policy"]


def test_dpo_without_pairs_or_reference_is_an_error(tiny_path):
    ln = _learner(tiny_path, objective="dpo")
    with pytest.raises(ValueError, match="needs TrainBatch.pairs"):
        ln.step(TrainBatch(PROMPTS, RESPONSES))
    with pytest.raises(ValueError, match="no reference model"):
        ln.step(TrainBatch(PROMPTS, RESPONSES, pairs=PAIRS))


def test_pg_loss_is_minus_advantage_times_logprob(tiny_path):
    ln = _learner(tiny_path, objective="pg")
    lp = ln.logprobs(PROMPTS, RESPONSES)
    adv = [torch.full((len(r),), float(i - 2)) for i, r in enumerate(RESPONSES)]
    n_tok = sum(map(len, RESPONSES))
    want = -sum(float((a * l).sum()) for a, l in zip(adv, lp)) / n_tok  # token_mean
    m = ln.step(TrainBatch(PROMPTS, RESPONSES, adv))
    assert m["loss/policy"] == pytest.approx(want, rel=1e-5)


def test_sync_ref_copies_the_policy(tiny_path):
    ln = TorchLearner(tiny_path, LearnerConfig(lr=1e-2, warmup_ratio=0.0, total_steps=10), need_ref=True)
    adv = [torch.ones(len(r)) for r in RESPONSES]
    ln.step(TrainBatch(PROMPTS, RESPONSES, adv))
    pol, ref = ln.logprobs(PROMPTS, RESPONSES), ln.logprobs(PROMPTS, RESPONSES, model="ref")
    assert not all(torch.equal(a, b) for a, b in zip(pol, ref))
    ln.sync_ref()
    ref = ln.logprobs(PROMPTS, RESPONSES, model="ref")
    assert all(torch.equal(a, b) for a, b in zip(pol, ref))
    with pytest.raises(ValueError, match="no reference model"):
        _learner(tiny_path).sync_ref()


def test_unknown_objective_is_refused():
    with pytest.raises(ValueError, match="unknown objective 'magic'"):
        LearnerConfig(objective="magic")


def test_batch_subset_renumbers_pairs():
    b = TrainBatch(PROMPTS, RESPONSES, pairs=PAIRS)
    s = b.subset([4, 5, 0, 1])
    assert s.pairs == [(2, 3), (0, 1)] and s.response_ids == [RESPONSES[i] for i in (4, 5, 0, 1)]


# ---- mini-batches by --train_batch_size: the learner's, so every recipe has them --------------
def _parts(size: int, n: int, pairs=None, updates: int = 0):
    from types import SimpleNamespace

    from serl.engines.learner_core import LearnerCore

    fake = SimpleNamespace(cfg=LearnerConfig(mini_batch_size=size), updates=updates, skipped_total=0)
    batch = TrainBatch([[1]] * n, [[2]] * n, pairs=pairs)
    return LearnerCore._mini_batches(fake, batch, pairs is not None)


@pytest.mark.parametrize("size,n,want", [(0, 5, [5]), (8, 5, [5]), (5, 5, [5]), (2, 5, [2, 2, 1]), (1, 3, [1, 1, 1])])
def test_mini_batches_cover_every_sequence_once(size, n, want):
    parts = _parts(size, n)
    assert [len(p) for p in parts] == want
    assert sorted(i for p in parts for i in p) == list(range(n))
    assert _parts(size, n) == parts  # the same optimizer position shuffles the same way
    if len(parts) > 1:
        assert sorted(i for p in _parts(size, n, updates=7) for i in p) == list(range(n))


def test_pairs_stay_whole_in_mini_batches():
    # 4 sequences a step = 2 pairs: three pairs make a part of two and a part of one
    parts = _parts(4, 6, pairs=PAIRS)
    assert sorted(map(len, parts)) == [2, 4]
    for p in parts:
        assert {(p[k], p[k + 1]) for k in range(0, len(p), 2)} <= set(PAIRS)
    assert _parts(1, 6, pairs=PAIRS) == [list(p) for p in _parts(2, 6, pairs=PAIRS)]  # at least one pair


@pytest.mark.parametrize("epochs", [1, 2])
def test_mini_batches_are_optimizer_steps_on_the_pre_update_policy(tiny_path, epochs):
    """train_batch_size 2 on 6 sequences: 3 optimizer steps per epoch, each on its part with
    the old log-probs of the policy before the first; the same as stepping the parts by hand."""
    adv = [torch.full((len(r),), float(i % 3 - 1)) for i, r in enumerate(RESPONSES)]
    batch = TrainBatch(PROMPTS, RESPONSES, adv)
    a = _learner(tiny_path, mini_batch_size=2, ppo_epochs=epochs)
    b = _learner(tiny_path, ppo_epochs=1)
    old = b.logprobs(PROMPTS, RESPONSES)
    by_hand = TrainBatch(PROMPTS, RESPONSES, adv, old_logprobs=old)
    for _ in range(epochs):  # each epoch reshuffles: its parts follow the optimizer's position
        for idx in _parts_at(b, batch):
            b.step(by_hand.subset(idx))
    m = a.step(batch)
    assert m["actor/updates"] == m["actor/steps"] == 3.0 * epochs == b.updates
    assert m["actor/tokens"] == epochs * sum(map(len, RESPONSES))
    wa, wb = dict(a.named_weights()), dict(b.named_weights())
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)
    one = _learner(tiny_path).step(batch)  # no --train_batch_size: one optimizer step
    assert one["actor/updates"] == 1.0 and "actor/steps" not in one


def _parts_at(learner, batch):
    from serl.engines.learner_core import LearnerCore

    saved = learner.cfg.mini_batch_size
    learner.cfg.mini_batch_size = 2
    try:
        return LearnerCore._mini_batches(learner, batch, False)
    finally:
        learner.cfg.mini_batch_size = saved
