"""TorchLearner: mechanics on a tiny random Llama (fast), learning on SmolLM2 (slow)."""

import math

import pytest
import torch

from serl.algos import ppo_clip_loss
from serl.engines.base import TrainBatch
from serl.engines.torch_learner import LearnerConfig, TorchLearner, lr_multiplier

PROMPTS = [[3, 4, 5], [6, 7], [8, 9, 10, 11, 12], [13]]
RESPONSES = [[20, 21], [22, 23, 24, 25], [26], [27, 28, 29]]


def _cfg(**kw):
    base = dict(actor_learning_rate=1e-2, lr_warmup_ratio=0.0, total_steps=10, micro_batch_size=2)
    base.update(kw)
    return LearnerConfig(**base)


def _batch(learner, adv_sign=(1, -1, 1, -1)):
    old = learner.logprobs(PROMPTS, RESPONSES)
    adv = [torch.full((len(r),), float(s)) for r, s in zip(RESPONSES, adv_sign)]
    return TrainBatch(PROMPTS, RESPONSES, adv, old)


def _weights(learner):
    return {n: w.clone() for n, w in learner.named_weights()}


def test_lr_schedule_by_hand():
    cfg = LearnerConfig(actor_learning_rate=1.0, lr_warmup_ratio=0.2, min_lr_ratio=0.1, total_steps=10)
    # warm-up 2 steps: 1/2, 2/2; cosine over the next 8: half way (update 6) = 0.1 + 0.9/2
    got = [lr_multiplier(u, cfg) for u in (0, 1, 2, 6, 10, 50)]
    assert got == pytest.approx([0.5, 1.0, 1.0, 0.55, 0.1, 0.1])
    serl = LearnerConfig()  # SeRL: 3 % of 100 steps
    assert [lr_multiplier(u, serl) for u in (0, 1, 2)] == pytest.approx([1 / 3, 2 / 3, 1.0])


def test_logprobs_match_a_plain_forward(tiny_path):
    learner = TorchLearner(tiny_path, _cfg(), need_ref=False)
    got = learner.logprobs(PROMPTS, RESPONSES)
    model = learner.policy
    for p, r, lp in zip(PROMPTS, RESPONSES, got):
        ids = torch.tensor([p + r])
        with torch.no_grad():
            full = torch.log_softmax(model(ids).logits[0].float(), -1)
        want = full[len(p) - 1 : len(p) + len(r) - 1].gather(-1, torch.tensor(r)[:, None])[:, 0]
        assert lp.shape == (len(r),) and lp.dtype == torch.float32
        assert torch.allclose(lp, want, atol=1e-5)


def test_no_reference_model_unless_needed(tiny_path):
    """need_ref alone decides (the recipe's rule, read by the factory); a KL-loss batch
    without reference log-probs on a learner without a reference is an error, not a guess."""
    assert TorchLearner(tiny_path, _cfg(), need_ref=False).ref is None
    assert TorchLearner(tiny_path, _cfg(), need_ref=True).ref is not None
    no_ref = TorchLearner(tiny_path, _cfg(kl_loss_coef=0.1), need_ref=False)
    assert no_ref.ref is None
    with pytest.raises(ValueError, match="no reference model"):
        no_ref.logprobs(PROMPTS, RESPONSES, model="ref")
    adv = [torch.ones(len(r)) for r in RESPONSES]
    with pytest.raises(ValueError, match="no reference model"):
        no_ref.step(TrainBatch(PROMPTS, RESPONSES, adv))


def test_named_weights_are_live_hf_names(tiny_path):
    from transformers import AutoModelForCausalLM

    learner = TorchLearner(tiny_path, _cfg(), need_ref=False)
    named = dict(learner.named_weights())
    live = dict(learner.policy.named_parameters())
    assert set(named) == set(live)
    assert all(named[n].data_ptr() == live[n].data_ptr() for n in named)  # no copies
    assert "model.embed_tokens.weight" in named and "lm_head.weight" not in named
    # the names load into a fresh HF model, whose tied head then follows
    fresh = AutoModelForCausalLM.from_pretrained(tiny_path)
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    missing, unexpected = fresh.load_state_dict(named, strict=False)
    assert unexpected == [] and set(missing) <= {"lm_head.weight"}
    assert torch.equal(fresh.lm_head.weight, named["model.embed_tokens.weight"])


def test_first_epoch_ratio_is_one_and_update_moves_weights(tiny_path):
    learner = TorchLearner(tiny_path, _cfg(), need_ref=False)
    before = _weights(learner)
    m = learner.step(_batch(learner))
    assert m["actor/ratio"] == pytest.approx(1.0, abs=1e-5)
    assert m["actor/clip_frac"] == 0.0 and m["actor/skipped"] == 0.0
    assert m["actor/tokens"] == sum(map(len, RESPONSES))
    assert m["actor/lr"] == pytest.approx(1e-2)
    assert m["actor/entropy"] > 0 and m["actor/grad_norm"] > 0
    after = _weights(learner)
    assert any(not torch.equal(before[n], after[n]) for n in before)


@pytest.mark.parametrize("epochs", [1, 2])
def test_on_policy_batch_without_old_logprobs_gives_the_same_update(tiny_path, epochs):
    """old_logprobs=None (the trainer's default) equals passing recomputed ones."""
    runs = []
    for give_old in (True, False):
        learner = TorchLearner(tiny_path, _cfg(ppo_epochs=epochs), need_ref=False)
        batch = _batch(learner)
        if not give_old:
            batch.old_logprobs = None
        runs.append((learner.step(batch), _weights(learner)))
    (m_old, w_old), (m_none, w_none) = runs
    for k in ("loss/policy", "actor/ratio", "actor/clip_frac", "actor/approx_kl"):
        assert m_none[k] == pytest.approx(m_old[k], abs=1e-6), k
    assert m_none["actor/grad_norm"] == pytest.approx(m_old["actor/grad_norm"], rel=1e-5)
    assert all(torch.allclose(w_none[n], w_old[n], atol=1e-6) for n in w_old)
    if epochs == 1:
        assert m_none["actor/ratio"] == 1.0 and m_none["actor/approx_kl"] == 0.0


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean"])
def test_micro_batch_size_does_not_change_the_update(tiny_path, agg):
    results = []
    for mbs in (1, 3, 4):
        learner = TorchLearner(tiny_path, _cfg(micro_batch_size=mbs, loss_agg=agg), need_ref=False)
        m = learner.step(_batch(learner))
        results.append((m, _weights(learner)))
    (m0, w0) = results[0]
    for m, w in results[1:]:
        assert m["loss/policy"] == pytest.approx(m0["loss/policy"], abs=1e-6)
        assert m["actor/grad_norm"] == pytest.approx(m0["actor/grad_norm"], rel=1e-4)
        # Adam divides by |g|: float noise on near-zero gradients shows at ~1e-6
        assert all(torch.allclose(w[n], w0[n], atol=1e-4) for n in w)


def test_nan_loss_skips_and_training_goes_on(tiny_path):
    learner = TorchLearner(tiny_path, _cfg(), need_ref=False)
    good = _batch(learner)
    bad = TrainBatch(good.prompt_ids, good.response_ids, [a.clone() for a in good.advantages], good.old_logprobs)
    bad.advantages[2][0] = float("nan")
    learner.step(good)
    before, opt_before = _weights(learner), learner.optimizer.state_dict()
    m = learner.step(bad)
    assert m["actor/skipped"] == 1.0 and m["actor/skipped_total"] == 1.0
    assert m["actor/updates"] == 1.0 and m["actor/lr"] == 0.0
    after = _weights(learner)
    assert all(torch.equal(before[n], after[n]) for n in before)
    assert all(p.grad is None for p in learner.policy.parameters())
    state = learner.optimizer.state_dict()["state"]
    assert all(torch.equal(state[k]["exp_avg"], opt_before["state"][k]["exp_avg"]) for k in state)
    m = learner.step(good)
    assert m["actor/skipped"] == 0.0 and m["actor/updates"] == 2.0


def test_inf_gradient_skips(tiny_path):
    learner = TorchLearner(tiny_path, _cfg(), need_ref=False)
    before = _weights(learner)
    p = learner.policy.model.layers[0].mlp.up_proj.weight
    h = p.register_hook(lambda g: g * float("inf"))
    m = learner.step(_batch(learner))
    h.remove()
    assert math.isfinite(m["loss/policy"]) and not math.isfinite(m["actor/grad_norm"])
    assert m["actor/skipped"] == 1.0
    assert all(torch.equal(before[n], w) for n, w in learner.named_weights())


def test_kl_loss_term(tiny_path):
    learner = TorchLearner(tiny_path, _cfg(kl_loss_coef=0.5, ppo_epochs=2), need_ref=True)
    batch = _batch(learner)
    m1 = learner.step(batch)
    # epoch 1: policy == ref, k3 = 0; epoch 2: policy moved, k3 > 0 -> mean > 0
    assert m1["loss/kl"] > 0 and m1["actor/updates"] == 2.0
    ref = learner.logprobs(PROMPTS, RESPONSES, model="ref")
    assert all(torch.equal(a, b) for a, b in zip(ref, batch.old_logprobs))


def test_bf16_and_checkpointing_step(tiny_path):
    learner = TorchLearner(tiny_path, _cfg(bf16=True, gradient_checkpointing=True), need_ref=False)
    m = learner.step(_batch(learner))
    assert m["actor/skipped"] == 0.0 and math.isfinite(m["loss/policy"])
    assert all(w.dtype == torch.float32 for _, w in learner.named_weights())


def test_bad_batch_names_the_field(tiny_path):
    learner = TorchLearner(tiny_path, _cfg(), need_ref=False)
    batch = _batch(learner)
    batch.old_logprobs[1] = batch.old_logprobs[1][:2]
    with pytest.raises(ValueError, match=r"old_logprobs\[1\] has 2 entries, response has 4"):
        learner.step(batch)
    with pytest.raises(ValueError, match="sequence 0: empty prompt"):
        learner.logprobs([[]], [[1]])
    with pytest.raises(ValueError, match="no response tokens"):
        learner.step(TrainBatch([], [], [], []))
    with pytest.raises(ValueError, match="loss_agg"):
        LearnerConfig(loss_agg="sum")
    with pytest.raises(ValueError, match="loss_agg_const must be > 0"):
        LearnerConfig(loss_agg="seq_sum_const")


def test_save_load_resumes_exactly(tiny_path, tmp_path):
    from transformers import AutoModelForCausalLM

    cfg = _cfg(lr_warmup_ratio=0.3)
    a = TorchLearner(tiny_path, cfg, need_ref=False)
    batch = _batch(a)
    a.step(batch)
    a.save(str(tmp_path / "ckpt"))
    m_a = a.step(batch)
    b = TorchLearner(tiny_path, cfg, need_ref=False)
    b.load(str(tmp_path / "ckpt"))
    m_b = b.step(batch)
    assert m_a == m_b  # same LR position, same loss, same grad norm
    wa, wb = _weights(a), _weights(b)
    assert all(torch.equal(wa[n], wb[n]) for n in wa)
    sa, sb = a.optimizer.state_dict()["state"], b.optimizer.state_dict()["state"]
    assert all(torch.equal(sa[k]["exp_avg_sq"], sb[k]["exp_avg_sq"]) for k in sa)
    # the checkpoint is a normal HF directory with the head still tied
    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path / "ckpt"))
    assert hf.lm_head.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr()
    with pytest.raises(FileNotFoundError, match="not a learner checkpoint"):
        b.load(str(tmp_path))


# ------------------------------------------------------------------ SmolLM2
@pytest.fixture(scope="module")
def smol(smol_path, smol_tokenizer):
    tok = smol_tokenizer
    learner = TorchLearner(
        smol_path,
        LearnerConfig(actor_learning_rate=2e-5, lr_warmup_ratio=0.0, total_steps=10, micro_batch_size=2),
        need_ref=False,
        tokenizer=tok,
    )
    prompts = [tok.encode("2+3="), tok.encode("Name a colour:")]
    responses = [tok.encode(" 5"), tok.encode(" blue, like the sky")]
    return learner, prompts, responses


@pytest.mark.slow
def test_smollm2_nan_leaves_weights_then_step_lowers_loss(smol):
    learner, prompts, responses = smol
    old = learner.logprobs(prompts, responses)
    adv = [torch.full((len(responses[0]),), 1.0), torch.full((len(responses[1]),), -1.0)]
    nan_adv = [adv[0].clone(), adv[1].clone()]
    nan_adv[1][0] = float("nan")
    before = _weights(learner)
    m = learner.step(TrainBatch(prompts, responses, nan_adv, old))
    assert m["actor/skipped"] == 1.0
    assert all(torch.equal(before[n], w) for n, w in learner.named_weights())
    del before

    def loss_now():
        lp = learner.logprobs(prompts, responses)
        pad = lambda xs: torch.nn.utils.rnn.pad_sequence(xs, batch_first=True)
        mask = pad([torch.ones(len(r)) for r in responses])
        return ppo_clip_loss(pad(lp), pad(old), pad(adv), mask)[0].item()

    start = loss_now()
    m = learner.step(TrainBatch(prompts, responses, adv, old))
    assert m["actor/skipped"] == 0.0
    assert m["loss/policy"] == pytest.approx(start, abs=1e-5)
    assert loss_now() < start - 1e-3
