"""--vllm_kv_cache_gib reaches the engine as its KV-cache byte count (no engine is started:
a stand-in ``vllm.LLM`` records what it was built with and the environment it saw)."""

import logging
import os
import sys
import types

import pytest
import torch

from serl import ConfigError
from serl.config.parser import parse_args


class FakeLLM:
    seen: list = []

    def __init__(self, **kwargs):
        FakeLLM.seen.append((kwargs, os.environ.get("VLLM_CPU_KVCACHE_SPACE")))

    def get_tokenizer(self):
        return None


@pytest.fixture
def fake_vllm(monkeypatch):
    FakeLLM.seen = []
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=FakeLLM))
    monkeypatch.setattr("serl.engines.vllm_generator.vllm_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    return FakeLLM


def build(cfg_args, model_path="/nonexistent/model"):
    from serl.engines.factory import generator_from_config

    cfg = parse_args(["--generator", "vllm", *cfg_args])[0]
    gen = generator_from_config(cfg, model_path)
    gen.close()


@pytest.mark.parametrize(
    "args, expected",
    [([], 2 * 2**30), (["--vllm_kv_cache_gib", "0.5"], 2**29), (["--vllm_kv_cache_gib", "0.375"], 402653184)],
)
def test_flag_sets_the_engines_kv_bytes(fake_vllm, args, expected):
    build(args)
    ((kwargs, env),) = fake_vllm.seen
    assert kwargs["kv_cache_memory_bytes"] == expected
    assert env is None  # the legacy variable would override the byte count inside vLLM
    assert "gpu_memory_utilization" not in kwargs


def test_legacy_env_variable_is_dropped_with_a_warning(fake_vllm, monkeypatch, caplog):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    with caplog.at_level(logging.WARNING, logger="serl.engines.vllm_generator"):
        build(["--vllm_kv_cache_gib", "1"])
    ((kwargs, env),) = fake_vllm.seen
    assert kwargs["kv_cache_memory_bytes"] == 2**30 and env is None
    assert "VLLM_CPU_KVCACHE_SPACE=4 is ignored" in caplog.text


@pytest.mark.parametrize("value", ["0", "-1"])
def test_non_positive_kv_cache_is_a_config_error(value):
    with pytest.raises(ConfigError, match="vllm_kv_cache_gib: must be > 0"):
        parse_args(["--vllm_kv_cache_gib", value])


@pytest.mark.parametrize("args, eager", [([], True), (["--vllm_enforce_eager", "false"], False)])
def test_enforce_eager_reaches_the_engine(fake_vllm, args, eager):
    build(args)
    ((kwargs, _),) = fake_vllm.seen
    assert kwargs["enforce_eager"] is eager
