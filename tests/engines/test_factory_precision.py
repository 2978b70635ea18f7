"""Each engine the factory builds takes the precision auto chooses for its hardware (faked here)."""

import pytest
import torch

from serl.config.plan import plan_run
from serl.config.registry import config_class
from serl.engines import factory
from serl.engines import precision as P

TrainConfig = config_class("serl")  # the SeRL recipe's options (plan_run reads them)

NATIVE = P.cpu_hardware(name="fake AMX", flags={"avx512f", "avx512_bf16", "amx_bf16"}, capability="AVX512")
EMULATED = P.cpu_hardware(name="fake AVX2", flags={"avx2"}, capability="AVX2")


@pytest.mark.parametrize(
    "hw,setting,bf16",
    [(NATIVE, "auto", True), (EMULATED, "auto", False), (EMULATED, "true", True), (NATIVE, "false", False)],
)
def test_learner_config_resolves_bf16_for_the_machine(monkeypatch, hw, setting, bf16):
    monkeypatch.setattr(P, "hardware", lambda device="cpu": hw)
    cfg = TrainConfig(bf16=setting, device="cpu")
    assert factory.learner_config(cfg, plan_run(cfg)).bf16 is bf16


@pytest.mark.parametrize("hw,dtype", [(NATIVE, torch.bfloat16), (EMULATED, torch.float32)])
def test_the_torch_learner_and_hf_generator_compute_in_the_chosen_dtype(monkeypatch, tiny_path, hw, dtype):
    from serl.engines.torch_learner import TorchLearner

    monkeypatch.setattr(P, "hardware", lambda device="cpu": hw)
    cfg = TrainConfig(device="cpu", generator="hf")
    learner = TorchLearner(tiny_path, factory.learner_config(cfg, plan_run(cfg)), need_ref=False)
    assert next(learner.policy.parameters()).dtype == dtype
    gen = factory.make_generator("hf", tiny_path, object(), device="cpu", dtype=cfg.generator_dtype)
    assert next(gen.model.parameters()).dtype == dtype and gen.dtype == str(dtype).removeprefix("torch.")


def test_run_precision_is_the_start_line(monkeypatch):
    monkeypatch.setattr(P, "hardware", lambda device="cpu": EMULATED)
    p = factory.run_precision(TrainConfig(device="cpu", generator="hf"))
    assert (p.learner, p.generator) == ("fp32", "float32")
    assert p.line().startswith("precision: fake AVX2 (AVX2 only: bf16 is emulated); learner fp32")
