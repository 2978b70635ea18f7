"""The asynchronous actor-learner's options: every recipe takes them, the peers' names are
rewritten to them, and values without a meaning are refused."""

import pytest

from serl import ConfigError
from serl.config.compat import rewrite
from serl.config.parser import parse_args
from serl.config.plan import plan_run
from serl.config.registry import config_class, recipe_names
from serl.config.sections import declared


def cfg_of(*argv):
    return parse_args(rewrite(list(argv)))[0]


@pytest.mark.parametrize("recipe", ["serl", "spin", "spiral", "spell"])
def test_every_recipe_takes_async_train(recipe):
    assert "async" in declared(config_class(recipe))
    cfg = cfg_of("--recipe", recipe, "--async_train", "--max_staleness", "3")
    assert cfg.async_train and cfg.max_staleness == 3
    assert recipe in recipe_names()


def test_the_peers_names():
    cfg = cfg_of("--enable_vllm_is_correction", "--vllm_importance_sampling_cap", "3")  # OpenRLHF, TRL
    assert cfg.importance_sampling_correction and cfg.importance_sampling_cap == 3.0
    assert cfg_of("--vllm_importance_sampling_correction").importance_sampling_correction
    cfg = cfg_of(
        "--enable_vllm_is_correction", "--vllm_is_truncated_threshold", "0", "5", "--vllm_is_correction_type", "tis"
    )
    assert cfg.importance_sampling_cap == 5.0


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--vllm_is_truncated_threshold", "0.5", "5"], "LOW must be 0"),
        (["--vllm_is_correction_type", "icepop"], "truncated importance sampling \\(tis\\) only"),
        (["--vllm_is_truncated_threshold", "5"], "expected two numbers"),
    ],
)
def test_openrlhf_settings_serl_cannot_honour_are_refused(argv, match):
    with pytest.raises(ConfigError, match=match):
        rewrite(argv)


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--async_train", "--max_staleness", "0"], "max_staleness: must be >= 1"),
        (["--max_staleness", "2"], "max_staleness: needs --async_train"),
        (["--importance_sampling_cap", "0.5"], "importance_sampling_cap: must be >= 1"),
    ],
)
def test_values_without_a_meaning_are_refused(argv, match):
    with pytest.raises(ConfigError, match=match):
        cfg_of(*argv)


def test_spin_dpo_refuses_the_correction():
    cfg = cfg_of("--recipe", "spin", "--importance_sampling_correction")
    with pytest.raises(ConfigError, match="recipe 'spin' trains DPO pairs"):
        plan_run(cfg)


def test_the_plan_holds_the_frame_and_the_learner_reads_the_cap_there():
    from serl.engines.factory import learner_config

    plain = plan_run(cfg_of())
    assert not plain.framed and plain.is_cap == 0.0 and learner_config(cfg_of(), plain).is_cap == 0.0
    cfg = cfg_of("--importance_sampling_correction", "--importance_sampling_cap", "3")
    plan = plan_run(cfg)
    assert plan.framed and not plan.async_train and plan.is_cap == 3.0 and learner_config(cfg, plan).is_cap == 3.0
    plan = plan_run(cfg_of("--async_train", "--max_staleness", "2"))
    assert plan.framed and plan.async_train and plan.max_staleness == 2 and plan.is_cap == 0.0
    assert plan_run(cfg_of("--importance_sampling_cap", "3")).is_cap == 0.0  # a cap without the correction


def test_the_collapse_guard_is_refused():
    with pytest.raises(ConfigError, match="not with --collapse_guard"):
        plan_run(cfg_of("--async_train", "--collapse_guard", "watch"))
