"""The shared learner core: objectives by name (DPO, plain PG) against numbers worked out
from log-probs, pair-preserving micro-batches, and the reference refresh."""

import math

import pytest
import torch

from serl.engines.base import TrainBatch
from serl.engines.learner_core import LearnerConfig
from serl.engines.micro import micro_batches
from serl.engines.precision import hardware, learner_bf16
from serl.engines.torch_learner import TorchLearner

PROMPTS = [[3, 4, 5], [3, 4, 5], [6, 7], [6, 7], [8, 9, 10, 11, 12], [8, 9, 10, 11, 12]]
RESPONSES = [[20, 21], [22, 23, 24, 25], [26], [27, 28, 29], [30, 31, 32], [33]]
PAIRS = [(0, 1), (3, 2), (4, 5)]  # (chosen, rejected)


def _learner(path, **kw):
    base = dict(actor_learning_rate=1e-2, lr_warmup_ratio=0.0, total_steps=10, micro_batch_size=2, max_norm=0.0)
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
    assert ma["dpo/accuracy"] == pytest.approx(sum((seq[c] - rseq[c]) > (seq[r] - rseq[r]) for c, r in PAIRS) / 3)
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
    want = -sum(float((a * ln).sum()) for a, ln in zip(adv, lp)) / n_tok  # token_mean
    m = ln.step(TrainBatch(PROMPTS, RESPONSES, adv))
    assert m["loss/policy"] == pytest.approx(want, rel=1e-5)


def test_sync_ref_copies_the_policy(tiny_path):
    ln = TorchLearner(
        tiny_path, LearnerConfig(actor_learning_rate=1e-2, lr_warmup_ratio=0.0, total_steps=10), need_ref=True
    )
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


# ---- shared prompts (LearnerConfig.share_prompts) -------------------------------------------
# GRPO-shaped: 3 responses to one prompt, 4 to another
GRPO_PROMPTS = [[3, 4, 5, 6, 7, 8]] * 3 + [[9, 10, 11]] * 4
GRPO_RESPONSES = [[20, 21], [22, 23, 24, 25], [26], [27, 28, 29], [30, 31, 32, 33, 34], [35], [36, 37]]


@pytest.mark.parametrize("objective", ["ppo_clip", "dpo"])
def test_token_budget_step_equals_the_count_step(tiny_path, objective):
    """Micro-batches cut by a token budget instead of a sequence count: fewer, fuller rows,
    and the same loss, metrics and updated weights (the loss is normalised over the whole
    batch, so how it is cut does not change it)."""
    kw = dict(objective="dpo", objective_args={"beta": 0.5}) if objective == "dpo" else dict(ppo_epochs=2)
    g = torch.Generator().manual_seed(5)
    adv = [torch.randn(len(r), generator=g) for r in RESPONSES]
    runs = []
    for tokens in (0, 64):
        ln = _learner(tiny_path, micro_batch_size=1 if objective != "dpo" else 2, micro_batch_tokens=tokens, **kw)
        units = [list(p) for p in PAIRS] if objective == "dpo" else None
        mbs, _ = ln._micro(PROMPTS, RESPONSES, units)
        if objective == "dpo":
            ref = [t + 0.3 * (i % 3) for i, t in enumerate(ln.logprobs(PROMPTS, RESPONSES))]
            batch = TrainBatch(PROMPTS, RESPONSES, ref_logprobs=ref, pairs=PAIRS)
        else:
            batch = TrainBatch(PROMPTS, RESPONSES, adv)
        runs.append((len(mbs), ln.step(batch), dict(ln.named_weights())))
    (n_count, m_count, w_count), (n_tok, m_tok, w_tok) = runs
    assert n_tok == 1 < n_count  # all 34 tokens fit one row of 64
    assert set(m_tok) == set(m_count)
    for key in m_count:
        assert m_tok[key] == pytest.approx(m_count[key], rel=1e-4, abs=1e-6), key
    for n in w_count:
        torch.testing.assert_close(w_tok[n], w_count[n], rtol=1e-4, atol=1e-3)


def test_token_budget_must_not_be_negative():
    with pytest.raises(ValueError, match="micro_batch_tokens must be >= 0"):
        LearnerConfig(micro_batch_tokens=-1)


def test_share_prompts_needs_packing():
    with pytest.raises(ValueError, match="share_prompts needs pack=True"):
        LearnerConfig(share_prompts=True, pack=False)


@pytest.mark.parametrize("objective", ["ppo_clip", "dpo"])
def test_share_prompts_step_equals_the_per_sequence_step(tiny_path, objective):
    """One step with the option on and off: the same metrics and the same updated weights.
    ppo_clip: two epochs with the KL loss, so the old and the reference log-probs are
    scored through the shared layout too; dpo: pairs whose two responses share a prompt."""
    if objective == "dpo":
        prompts, responses = PROMPTS, RESPONSES
        kw, need_ref = dict(objective="dpo", objective_args={"beta": 0.5}), False
    else:
        prompts, responses = GRPO_PROMPTS, GRPO_RESPONSES
        kw, need_ref = dict(kl_loss_coef=0.1, ppo_epochs=2), True
    g = torch.Generator().manual_seed(3)
    adv = [torch.randn(len(r), generator=g) for r in responses]
    runs = []
    for share in (False, True):
        ln = TorchLearner(
            tiny_path,
            LearnerConfig(
                actor_learning_rate=1e-2,
                lr_warmup_ratio=0.0,
                total_steps=10,
                micro_batch_size=2,
                share_prompts=share,
                **kw,
            ),
            need_ref=need_ref,
        )
        mbs, _ = ln._micro(prompts, responses, [list(p) for p in PAIRS] if objective == "dpo" else None)
        assert all((mb.shared is not None) == share for mb in mbs)
        if objective == "dpo":
            ref = [t + 0.3 * (i % 3) for i, t in enumerate(ln.logprobs(prompts, responses))]
            batch = TrainBatch(prompts, responses, ref_logprobs=ref, pairs=PAIRS)
        else:
            batch = TrainBatch(prompts, responses, adv)
        runs.append((len(mbs), ln.step(batch), dict(ln.named_weights())))
    (n_off, m_off, w_off), (n_on, m_on, w_on) = runs
    assert n_on < n_off  # each prompt written once per micro-batch: fewer, fuller rows
    assert set(m_on) == set(m_off)
    for key in m_off:
        assert m_on[key] == pytest.approx(m_off[key], rel=1e-4, abs=1e-6), key
    for n in w_off:  # Adam moves each weight by ~lr = 1e-2 a step, near-zero gradients too, so
        # rounding in one of those can move a weight by 1e-4; a wrong layout moves most by ~1e-2
        torch.testing.assert_close(w_on[n], w_off[n], rtol=1e-4, atol=1e-3)


SMOL_PROMPTS = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a can of oil "
    "and a cloth. The lamp had burned for ninety years without failing once. Question: how long "
    "had the lamp burned?",
    "A train leaves the station at nine and travels sixty kilometres an hour for two and a half "
    "hours. How far does it go?",
)
SMOL_RESPONSES = (
    (" Ninety years.", " It had burned for ninety years without failing.", " 90"),
    (
        " It goes 150 km.",
        " 60 x 2.5 = 150 kilometres, so the train travels 150 km in total.",
        " One hundred and fifty kilometres.",
    ),
)


def _shared_vs_per_sequence(ln, prompts, responses, adv):
    """Per-token log-probs, and the gradient of sum(log-prob x advantage), with the option off
    and on (the same learner, so the same weights)."""
    out = []
    for share in (False, True):
        ln.cfg.share_prompts = share
        mbs, _ = ln._micro(prompts, responses)
        assert all((mb.shared is not None) == share for mb in mbs)
        net = ln._net("policy")
        for mb in mbs:
            flat = ln._token_logprobs(net, mb)[0]
            (flat * torch.cat([adv[i] for i in mb.index])).sum().backward()
        if ln.lora is not None:
            weights = ln.lora.adapter_params()
        else:
            weights = ln.master.named() if ln.master else ln.policy.named_parameters()
        grads = {n: w.grad.float().clone() for n, w in weights if w.grad is not None}
        ln._zero_grad()
        out.append((torch.cat(ln.logprobs(prompts, responses)), grads))
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode,kw,lp_tol,grad_tol",
    [("fp32", {}, 1e-4, 1e-3), ("lora_auto", dict(lora_rank=8, lora_alpha=16.0), 0.15, 0.1)],
)  # as SPELL runs
def test_smollm2_shared_prompts_equal_per_sequence(smol_path, smol_tokenizer, mode, kw, lp_tol, grad_tol):
    """Real text on SmolLM2: full fine-tuning in fp32, log-probs to 1e-4 and gradients to
    1e-3 of each tensor's largest entry; LoRA in the precision ``--bf16 auto`` picks here (bf16
    only where the CPU computes it natively: emulated, it took 87 s on an AVX2-only EPYC), in bf16
    to its rounding (log-probs within 0.15, as packed vs padded in test_varlen; gradients within
    10% in norm), in fp32 to fp32's tolerances. Full bf16 passed too (about 2 minutes: left out)."""
    if mode == "lora_auto":
        bf16 = learner_bf16("auto", hardware("cpu"))
        kw = dict(kw, bf16=bf16)
        lp_tol, grad_tol = (lp_tol, grad_tol) if bf16 else (1e-4, 1e-3)
        mode = "lora_bf16" if bf16 else "lora_fp32"
    tok = smol_tokenizer
    prompts = [tok.encode(p) for p, rs in zip(SMOL_PROMPTS, SMOL_RESPONSES) for _ in rs]
    responses = [tok.encode(r) for rs in SMOL_RESPONSES for r in rs]
    g = torch.Generator().manual_seed(0)
    adv = [torch.randn(len(r), generator=g) for r in responses]
    ln = TorchLearner(smol_path, LearnerConfig(micro_batch_size=2, **kw), need_ref=False)
    if ln.lora is not None:  # B starts at zero: move it so that the adapter changes the numbers
        with torch.no_grad():
            for _, p in ln.lora.adapter_params():
                p.add_(torch.randn(p.shape, generator=g).to(p.dtype) * 0.02)
    (lp_off, g_off), (lp_on, g_on) = _shared_vs_per_sequence(ln, prompts, responses, adv)
    assert lp_on.shape == lp_off.shape == (sum(map(len, responses)),)
    assert (lp_on - lp_off).abs().max() <= lp_tol
    assert set(g_on) == set(g_off) and g_off
    if mode.endswith("fp32"):
        for n in g_off:
            assert (g_on[n] - g_off[n]).abs().max() <= grad_tol * max(g_off[n].abs().max().item(), 1e-6), n
    else:
        diff = sum(float((g_on[n] - g_off[n]).norm() ** 2) for n in g_off) ** 0.5
        norm = sum(float(g_off[n].norm() ** 2) for n in g_off) ** 0.5
        assert diff <= grad_tol * norm, (diff, norm)
