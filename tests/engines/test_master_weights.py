"""bf16 compute weights with fp32 masters: gradients accumulate in fp32, the optimizer
moves the masters, the bf16 copies follow; TorchLearner's bf16 default built on it."""

import json

import pytest
import torch

from serl.engines.base import TrainBatch
from serl.engines.master_weights import MasterWeights
from serl.engines.torch_learner import LearnerConfig, TorchLearner

PROMPTS = [[3, 4, 5], [6, 7], [8, 9, 10, 11, 12], [13]]
RESPONSES = [[20, 21], [22, 23, 24, 25], [26], [27, 28, 29]]


def test_gradients_accumulate_in_fp32_by_hand():
    lin = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, 2.0]]))
    mw = MasterWeights(lin)
    assert lin.weight.dtype == torch.bfloat16 and mw.masters[0].dtype == torch.float32
    for x in ([1.0, 1.0], [0.5, 3.0]):  # d(w.x)/dw = x, summed over the two passes
        lin(torch.tensor([x], dtype=torch.bfloat16)).sum().backward()
    assert mw.masters[0].grad.tolist() == [[1.5, 4.0]] and lin.weight.grad is None
    # the master keeps what bf16 cannot hold; push rounds it into the compute copy
    with torch.no_grad():
        mw.masters[0].copy_(torch.tensor([[1.0 + 2**-10, 2.0]]))
    mw.push()
    assert lin.weight.tolist() == [[1.0, 2.0]] and mw.masters[0][0, 0].item() == 1.0 + 2**-10


def test_llama_parameters_turn_bf16_buffers_and_ties_stay(tiny_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    mw = MasterWeights(model)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert model.model.rotary_emb.inv_freq.dtype == torch.float32  # rotary angles stay exact
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert dict(mw.named()).keys() == before.keys()
    assert all(torch.equal(m, before[n]) for n, m in mw.named())


def _learner(path, **kw):
    base = dict(actor_learning_rate=1e-2, lr_warmup_ratio=0.0, total_steps=10, micro_batch_size=2, bf16=True)
    return TorchLearner(path, LearnerConfig(**{**base, **kw}), need_ref=False)


def _batch(learner):
    old = learner.logprobs(PROMPTS, RESPONSES)
    return TrainBatch(PROMPTS, RESPONSES, [torch.full((len(r),), s) for r, s in zip(RESPONSES, (1.0, -1, 1, -1))], old)


def test_step_moves_the_masters_and_the_bf16_copies_follow(tiny_path):
    learner = TorchLearner(
        tiny_path,
        LearnerConfig(actor_learning_rate=1e-2, lr_warmup_ratio=0.0, total_steps=10, bf16=True),
        need_ref=True,
    )
    assert learner.master is not None and learner.ref.model.embed_tokens.weight.dtype == torch.bfloat16
    assert {id(p) for g in learner.optimizer.param_groups for p in g["params"]} == {
        id(m) for m in learner.master.masters
    }
    before = {n: w.clone() for n, w in learner.named_weights()}
    m = learner.step(_batch(learner))
    assert m["actor/skipped"] == 0.0 and m["actor/grad_norm"] > 0
    live = dict(learner.policy.named_parameters())
    for n, w in learner.named_weights():
        assert w.dtype == torch.float32 and torch.equal(live[n], w.to(torch.bfloat16))
    assert any(not torch.equal(before[n], w) for n, w in learner.named_weights())
    learner.sync_ref()
    pol, ref = learner.logprobs(PROMPTS, RESPONSES), learner.logprobs(PROMPTS, RESPONSES, model="ref")
    assert all(torch.equal(a, b) for a, b in zip(pol, ref))


def test_bf16_weights_follow_autocast_closely(tiny_path):
    """Same batch, same start: the master-weights update and the autocast update agree to
    bf16 precision (gradient norm to 2 %; first-step Adam moves each weight by ~lr)."""
    runs = []
    for bw in (False, True):
        learner = _learner(tiny_path, bf16_weights=bw)
        m = learner.step(_batch(learner))
        runs.append((m, {n: w.clone() for n, w in learner.named_weights()}))
    (m_a, w_a), (m_b, w_b) = runs
    assert m_b["actor/grad_norm"] == pytest.approx(m_a["actor/grad_norm"], rel=0.02)
    assert m_b["loss/policy"] == pytest.approx(m_a["loss/policy"], abs=0.02)
    moved_apart = sum(int((w_a[n] - w_b[n]).abs().gt(1e-3).sum()) for n in w_a)
    assert moved_apart <= 0.02 * sum(w.numel() for w in w_a.values())


def test_nan_skip_and_exact_resume(tiny_path, tmp_path):
    a = _learner(tiny_path, lr_warmup_ratio=0.3)
    batch = _batch(a)
    a.step(batch)
    bad = TrainBatch(batch.prompt_ids, batch.response_ids, [x.clone() for x in batch.advantages], batch.old_logprobs)
    bad.advantages[0][0] = float("nan")
    before = {n: w.clone() for n, w in a.named_weights()}
    assert a.step(bad)["actor/skipped"] == 1.0
    assert all(torch.equal(before[n], w) for n, w in a.named_weights())
    assert all(m.grad is None for m in a.master.masters) and all(p.grad is None for p in a.policy.parameters())
    a.save(str(tmp_path / "ckpt"))
    m_a = a.step(batch)
    b = _learner(tiny_path, lr_warmup_ratio=0.3)
    b.load(str(tmp_path / "ckpt"))
    assert b.step(batch) == m_a
    wb = dict(b.named_weights())
    assert all(torch.equal(w, wb[n]) for n, w in a.named_weights())
    # the checkpoint holds the fp32 masters and says so
    from safetensors.torch import load_file

    saved = load_file(str(tmp_path / "ckpt" / "model.safetensors"))
    assert {t.dtype for t in saved.values()} == {torch.float32}
    assert json.loads((tmp_path / "ckpt" / "config.json").read_text())["dtype"] == "float32"


@pytest.mark.parametrize("saved_bf16,loaded_bf16", [(True, False), (False, True)])
def test_a_checkpoint_resumes_in_the_other_precision(tiny_path, tmp_path, saved_bf16, loaded_bf16):
    """--bf16 auto may choose differently on the machine a run resumes on (serl.engines.precision):
    the fp32 weights (the masters) and Adam's moments carry over, and the next step runs."""
    a = _learner(tiny_path, bf16=saved_bf16)
    a.step(_batch(a))
    a.save(str(tmp_path / "ckpt"))
    b = _learner(tiny_path, bf16=loaded_bf16)
    b.load(str(tmp_path / "ckpt"))
    for (n, wa), (_, wb) in zip(a.named_weights(), b.named_weights()):
        assert wb.dtype == torch.float32 and torch.equal(wa, wb), n
    sa, sb = a.optimizer.state_dict()["state"], b.optimizer.state_dict()["state"]
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k]["exp_avg"], sb[k]["exp_avg"]) for k in sa)
    assert b.updates == a.updates == 1
    assert b.step(_batch(b))["actor/skipped"] == 0.0
