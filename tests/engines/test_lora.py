"""LoRA in the torch learner: reference = base with the adapter off, merged weights for the
generators, save/resume of the adapter. Tiny random Llama (fast) and SmolLM2 (slow)."""

import copy

import pytest
import torch

from serl import ConfigError
from serl.engines.base import TrainBatch
from serl.engines.lora import base_identity
from serl.engines.lora_targets import ALL_LINEAR, parse_targets
from serl.engines.torch_learner import LearnerConfig, TorchLearner

PROMPTS = [[3, 4, 5], [6, 7], [8, 9, 10, 11, 12], [13]]
RESPONSES = [[20, 21], [22, 23, 24, 25], [26], [27, 28, 29]]


def _cfg(**kw):
    base = dict(
        actor_learning_rate=1e-2,
        lr_warmup_ratio=0.0,
        total_steps=10,
        micro_batch_size=2,
        seed=0,
        lora_rank=4,
        lora_alpha=8.0,
    )
    base.update(kw)
    return LearnerConfig(**base)


def _batch(learner, seed=0, old=True):
    g = torch.Generator().manual_seed(seed)
    adv = [torch.randn(len(r), generator=g) for r in RESPONSES]
    return TrainBatch(PROMPTS, RESPONSES, adv, learner.logprobs(PROMPTS, RESPONSES) if old else None)


def _adapter(learner):
    return {n: p.detach().clone() for n, p in learner.lora.adapter_params()}


def _equal(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize(
    "spec,want", [("all-linear", ALL_LINEAR), ("", ALL_LINEAR), ("q_proj, v_proj", ["q_proj", "v_proj"])]
)
def test_parse_targets(spec, want):
    assert parse_targets(spec) == want


def test_parse_targets_refuses_all_linear_with_names():
    with pytest.raises(ValueError, match="all-linear"):
        parse_targets("all-linear,q_proj")


@pytest.mark.parametrize("rank,targets,want", [(4, "all-linear", 4 * 1024), (8, "q_proj,v_proj", 8 * 224)])
def test_only_the_adapter_trains(tiny_path, rank, targets, want):
    # by hand, per layer and rank r: q 32->32, k 32->16, v 32->16, o 32->32, gate/up 32->64,
    # down 64->32 give r * (64 + 48 + 48 + 64 + 96 + 96 + 96) = 512 r; two layers: 1024 r.
    # q and v alone: r * (64 + 48) per layer, 224 r for both.
    ln = TorchLearner(tiny_path, _cfg(lora_rank=rank, target_modules=targets), need_ref=False)
    assert ln.lora.num_trainable() == want
    in_opt = sum(p.numel() for g in ln.optimizer.param_groups for p in g["params"])
    assert in_opt == want
    base = {n: w.clone() for n, w in ln.policy.named_parameters() if not w.requires_grad}
    ln.step(_batch(ln))
    assert all(torch.equal(w, base[n]) for n, w in ln.policy.named_parameters() if n in base)


def test_unknown_target_module_is_a_config_error(tiny_path):
    with pytest.raises(ConfigError, match="target_modules"):
        TorchLearner(tiny_path, _cfg(target_modules="no_such_proj"), need_ref=False)


def test_reference_is_the_base_with_the_adapter_off_exactly(tiny_path):
    plain = TorchLearner(tiny_path, _cfg(lora_rank=0), need_ref=False)
    want = plain.logprobs(PROMPTS, RESPONSES)
    ln = TorchLearner(tiny_path, _cfg(kl_loss_coef=0.1), need_ref=True)
    assert ln.ref is None  # no second copy of the model
    for _ in range(2):
        ln.step(_batch(ln))
    assert _equal(ln.logprobs(PROMPTS, RESPONSES, model="ref"), want)
    assert not _equal(ln.logprobs(PROMPTS, RESPONSES), want)  # the policy did move
    assert all(p.requires_grad for _, p in ln.lora.adapter_params())  # still trainable after


def test_no_reference_without_need_ref(tiny_path):
    ln = TorchLearner(tiny_path, _cfg(), need_ref=False)
    with pytest.raises(ValueError, match="no reference"):
        ln.logprobs(PROMPTS, RESPONSES, model="ref")


def test_merge_by_hand(tiny_path):
    # rank 2, alpha 4: scale 2; A = 0.5, B = 0.25 everywhere gives (B @ A)_ij = 2 * 0.5 * 0.25
    # = 0.25, so every merged entry is W + 2 * 0.25 = W + 0.5.
    ln = TorchLearner(tiny_path, _cfg(lora_rank=2, lora_alpha=4.0, target_modules="q_proj"), need_ref=False)
    with torch.no_grad():
        for n, p in ln.lora.adapter_params():
            p.fill_(0.5 if ".lora_A." in n else 0.25)
    merged = dict(ln.named_weights())
    base = dict(ln.policy.named_parameters())
    w = base["model.layers.0.self_attn.q_proj.base_layer.weight"]
    torch.testing.assert_close(merged["model.layers.0.self_attn.q_proj.weight"], w + 0.5, rtol=0, atol=1e-6)
    assert torch.equal(merged["model.layers.0.self_attn.k_proj.weight"], base["model.layers.0.self_attn.k_proj.weight"])


def test_merged_weights_equal_peft_merge_and_leave_the_adapter_alone(tiny_path):
    ln = TorchLearner(tiny_path, _cfg(), need_ref=False)
    fresh = dict(ln.named_weights())  # B = 0: merged == base, exactly
    plain = dict(TorchLearner(tiny_path, _cfg(lora_rank=0), need_ref=False).named_weights())
    assert list(fresh) == list(plain)  # HF names, same order, tied head once
    assert all(torch.equal(fresh[k], plain[k]) for k in plain)
    for s in range(2):
        ln.step(_batch(ln, s))
    before, lp = _adapter(ln), ln.logprobs(PROMPTS, RESPONSES)
    ours = dict(ln.named_weights())
    peft_merged = dict(copy.deepcopy(ln.lora.peft).merge_and_unload().named_parameters())
    assert list(ours) == list(peft_merged)
    for k in ours:
        torch.testing.assert_close(ours[k], peft_merged[k], rtol=0, atol=1e-6)
    assert any(not torch.equal(ours[k], plain[k]) for k in ours)
    after = _adapter(ln)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert _equal(ln.logprobs(PROMPTS, RESPONSES), lp)


def test_generator_serves_the_merged_policy(tiny_path):
    from serl.engines.hf_generator import HFGenerator

    ln = TorchLearner(tiny_path, _cfg(), need_ref=False)
    for s in range(2):
        ln.step(_batch(ln, s))
    gen = HFGenerator(tiny_path, tokenizer=object(), seed=0, device="cpu")  # only weights are used
    gen.load_weights(ln.named_weights())
    ids = torch.tensor([PROMPTS[2] + RESPONSES[2]])
    with torch.no_grad():
        lp = torch.log_softmax(gen.model(ids).logits[0].float(), -1)
    n = len(PROMPTS[2])
    got = lp[n - 1 : n - 1 + len(RESPONSES[2])].gather(-1, torch.tensor(RESPONSES[2])[:, None]).squeeze(-1)
    torch.testing.assert_close(got, ln.logprobs([PROMPTS[2]], [RESPONSES[2]])[0], rtol=0, atol=1e-5)


def test_dropout_only_in_updates(tiny_path):
    ln = TorchLearner(tiny_path, _cfg(lora_dropout=0.5), need_ref=False)
    ln.step(_batch(ln))  # B != 0 from here on, so dropout would change the scores
    assert _equal(ln.logprobs(PROMPTS, RESPONSES), ln.logprobs(PROMPTS, RESPONSES))
    assert ln.policy.training  # back in training mode for the updates


def test_sync_ref_snapshots_the_adapter(tiny_path, tmp_path):
    ln = TorchLearner(tiny_path, _cfg(kl_loss_coef=0.1), need_ref=True)
    ln.step(_batch(ln))
    ln.sync_ref()
    now = ln.logprobs(PROMPTS, RESPONSES)
    assert _equal(ln.logprobs(PROMPTS, RESPONSES, model="ref"), now)
    ln.step(_batch(ln, 1))
    assert _equal(ln.logprobs(PROMPTS, RESPONSES, model="ref"), now)  # the snapshot, not the policy
    moved = ln.logprobs(PROMPTS, RESPONSES)
    assert not _equal(moved, now)
    ln.save(str(tmp_path / "ck"))
    again = TorchLearner(tiny_path, _cfg(kl_loss_coef=0.1), need_ref=True)
    again.load(str(tmp_path / "ck"))
    assert _equal(again.logprobs(PROMPTS, RESPONSES, model="ref"), now)
    assert _equal(again.logprobs(PROMPTS, RESPONSES), moved)


def test_save_load_resumes_exactly_and_writes_peft_layout(tiny_path, tmp_path):
    ln = TorchLearner(tiny_path, _cfg(), need_ref=False)
    ln.step(_batch(ln, 0))
    ln.save(str(tmp_path / "ck"))
    w1 = _adapter(ln)
    names = {p.name for p in (tmp_path / "ck").iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "lora_state.pt", "learner_state.pt"} <= names
    assert not any(n.startswith("model") and n.endswith(".safetensors") for n in names)  # no full copy
    b2 = _batch(ln, 1)
    m2, w2 = ln.step(b2), _adapter(ln)
    other = TorchLearner(tiny_path, _cfg(), need_ref=False)
    other.load(str(tmp_path / "ck"))
    m2_again = other.step(b2)
    assert m2 == m2_again
    assert all(torch.equal(w2[k], v) for k, v in _adapter(other).items())
    # PEFT reads the adapter onto the base model and gives the same scores
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_path), str(tmp_path / "ck"))
    theirs = {n.removeprefix("base_model.model."): p for n, p in model.named_parameters() if ".lora_" in n}
    assert set(theirs) == set(w1)
    assert all(torch.equal(theirs[k], w1[k]) for k in w1)


def test_load_refuses_another_base_or_other_settings(tiny_path, tmp_path, save_tiny):
    ln = TorchLearner(tiny_path, _cfg(), need_ref=False)
    ln.save(str(tmp_path / "ck"))
    other_base = save_tiny(tmp_path / "other", seed=1)
    with pytest.raises(ValueError, match="different base"):
        TorchLearner(other_base, _cfg(), need_ref=False).load(str(tmp_path / "ck"))
    with pytest.raises(ValueError, match="LoRA settings"):
        TorchLearner(tiny_path, _cfg(lora_alpha=16.0), need_ref=False).load(str(tmp_path / "ck"))
    with pytest.raises(FileNotFoundError, match="lora_state"):
        full = TorchLearner(tiny_path, _cfg(lora_rank=0), need_ref=False)
        full.save(str(tmp_path / "full"))
        TorchLearner(tiny_path, _cfg(), need_ref=False).load(str(tmp_path / "full"))


def test_base_identity(tiny_path, tmp_path, save_tiny):
    import shutil

    a = base_identity(tiny_path)
    copy_dir = tmp_path / "copy"
    shutil.copytree(tiny_path, copy_dir)
    assert base_identity(str(copy_dir))["fingerprint"] == a["fingerprint"]  # same files elsewhere
    other = base_identity(save_tiny(tmp_path / "other", seed=1))
    assert other["fingerprint"] != a["fingerprint"]  # same architecture and sizes, other weights
    assert base_identity("org/name")["path"] == "org/name"


def test_export_hf_writes_the_merged_model(tiny_path, tmp_path):
    from transformers import AutoModelForCausalLM

    ln = TorchLearner(tiny_path, _cfg(), need_ref=False)
    ln.step(_batch(ln))
    ln.export_hf(str(tmp_path / "merged"))
    loaded = dict(AutoModelForCausalLM.from_pretrained(str(tmp_path / "merged")).named_parameters())
    for k, v in ln.named_weights():
        assert torch.equal(loaded[k], v), k


def test_a_saved_adapter_merges_to_what_export_hf_writes(tiny_path, tmp_path, save_tiny):
    """A checkpoint without a merged model (a run stopped mid-segment) is merged afterwards
    to the very weights the learner would have exported at that step."""
    from transformers import AutoModelForCausalLM

    from serl.engines.lora import merge_saved_adapter

    ln = TorchLearner(tiny_path, _cfg(), need_ref=False)
    ln.step(_batch(ln))
    ln.save(str(tmp_path / "ck"))
    ln.export_hf(str(tmp_path / "by_learner"))
    merge_saved_adapter(tmp_path / "ck", tiny_path, tmp_path / "by_file")
    mine = dict(AutoModelForCausalLM.from_pretrained(str(tmp_path / "by_file")).named_parameters())
    want = dict(AutoModelForCausalLM.from_pretrained(str(tmp_path / "by_learner")).named_parameters())
    assert set(mine) == set(want)
    assert all(torch.equal(mine[k], want[k]) for k in want)
    base = dict(AutoModelForCausalLM.from_pretrained(tiny_path).named_parameters())
    assert not torch.equal(
        mine["model.layers.0.self_attn.q_proj.weight"], base["model.layers.0.self_attn.q_proj.weight"]
    )
    with pytest.raises(ValueError, match="different base"):
        merge_saved_adapter(tmp_path / "ck", save_tiny(tmp_path / "other", seed=1), tmp_path / "none")
    assert not (tmp_path / "none").exists()


@pytest.mark.slow
def test_smollm2_reference_exact_and_merge_matches_peft(smol_path, smol_tokenizer):
    tok = smol_tokenizer
    prompts = [tok.encode("2+3="), tok.encode("Name a colour:")]
    responses = [tok.encode(" 5"), tok.encode(" blue, like the sky")]
    cfg = dict(actor_learning_rate=1e-3, lr_warmup_ratio=0.0, total_steps=10, micro_batch_size=2, seed=0)
    plain = TorchLearner(smol_path, LearnerConfig(**cfg), need_ref=False)
    want = plain.logprobs(prompts, responses)
    del plain
    ln = TorchLearner(smol_path, LearnerConfig(**cfg, lora_rank=8, lora_alpha=16.0, kl_loss_coef=0.01), need_ref=True)
    adv = [torch.ones(len(r)) for r in responses]
    ln.step(TrainBatch(prompts, responses, adv, ln.logprobs(prompts, responses)))
    assert _equal(ln.logprobs(prompts, responses, model="ref"), want)
    assert not _equal(ln.logprobs(prompts, responses), want)
    ours = dict(ln.named_weights())
    theirs = dict(copy.deepcopy(ln.lora.peft).merge_and_unload().named_parameters())
    assert list(ours) == list(theirs)
    for k in ours:
        torch.testing.assert_close(ours[k], theirs[k], rtol=0, atol=1e-6)


def test_gradient_checkpointing_gives_the_same_update(tiny_path):
    runs = []
    for ckpt in (False, True):
        ln = TorchLearner(tiny_path, _cfg(gradient_checkpointing=ckpt), need_ref=False)
        m = ln.step(_batch(ln))
        runs.append((m, _adapter(ln)))
    (m0, w0), (m1, w1) = runs
    for key in ("loss/policy", "actor/grad_norm", "actor/entropy"):
        assert m1[key] == pytest.approx(m0[key], rel=1e-5, abs=1e-7), key
    for k in w0:
        torch.testing.assert_close(w1[k], w0[k], rtol=0, atol=1e-6)


def test_bf16_frozen_weights_compute_as_the_full_bf16_learner(tiny_path):
    # under LoRA every frozen weight is stored in bf16 and the adapter sees bf16 input: at
    # init (B = 0) the model is exactly the full-weight bf16 learner's, and after an update
    # it stays within bf16 rounding of autocast over fp32 weights
    lora = TorchLearner(tiny_path, _cfg(bf16=True), need_ref=True)
    full = TorchLearner(tiny_path, _cfg(bf16=True, lora_rank=0), need_ref=True)
    auto = TorchLearner(tiny_path, _cfg(bf16=True, bf16_weights=False), need_ref=True)
    frozen = [p for p in lora.policy.parameters() if not p.requires_grad]
    assert frozen and all(p.dtype == torch.bfloat16 for p in frozen)
    assert all(p.dtype == torch.float32 for _, p in lora.lora.adapter_params())
    assert all(p.dtype == torch.float32 for p in auto.policy.parameters())
    for model in ("policy", "ref"):
        assert _equal(lora.logprobs(PROMPTS, RESPONSES, model=model), full.logprobs(PROMPTS, RESPONSES, model=model)), (
            model
        )
    before = _adapter(lora)
    for ln in (lora, auto):
        ln.step(_batch(ln))
    assert any(not torch.equal(before[n], p) for n, p in lora.lora.adapter_params())
    for model in ("policy", "ref"):
        a, b = lora.logprobs(PROMPTS, RESPONSES, model=model), auto.logprobs(PROMPTS, RESPONSES, model=model)
        assert all(torch.allclose(x, y, atol=2e-2) for x, y in zip(a, b)), model
    for (n1, w1), (n2, w2) in zip(lora.named_weights(), auto.named_weights()):
        assert n1 == n2 and torch.allclose(w1.float(), w2.float(), atol=2e-2), n1
