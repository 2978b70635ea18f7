"""The run's plan: KL setting, reference and where it lives, objective, epochs, LR span."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import pytest

from serl import ConfigError
from serl.config.options import TrainConfig
from serl.config.parser import parse_args
from serl.config.plan import RunPlan, kl_mode, plan_run
from serl.engines.factory import learner_config


def plan(*flags):
    cfg, _ = parse_args(list(flags))
    return cfg, plan_run(cfg)


@pytest.mark.parametrize(
    "flags,kl,coef,ref,loss_coef",
    [
        ([], "reward", 1e-4, "learner", 0.0),  # SeRL's default: Reinforce++
        (["--use_kl_loss", "--init_kl_coef", "0.01"], "loss", 0.01, "learner", 0.01),  # GRPO
        (["--init_kl_coef", "0"], "none", 0.0, "none", 0.0),
        (["--use_kl_loss", "--init_kl_coef", "0"], "none", 0.0, "none", 0.0),  # no coefficient, no KL
        (["--lora_rank", "4"], "reward", 1e-4, "lora", 0.0),  # the base, adapter off
    ],
)
def test_serl_kl_settings(flags, kl, coef, ref, loss_coef):
    cfg, p = plan(*flags)
    assert (p.kl, p.kl_coef, p.reference) == (kl, coef, ref)
    assert learner_config(cfg, p).kl_loss_coef == loss_coef  # the learner holds one number


@pytest.mark.parametrize(
    "flags,ref,workers,in_learner",
    [
        (["--ray", "--ref_num_nodes", "2", "--ref_num_gpus_per_node", "3"], "workers", 6, False),
        (["--ray", "--ref_num_gpus_per_node", "0"], "learner", 0, True),
        (["--ray", "--lora_rank", "8"], "lora", 0, True),
        (["--ray", "--init_kl_coef", "0"], "none", 0, False),
    ],
)
def test_where_the_reference_lives_under_ray(flags, ref, workers, in_learner):
    _, p = plan(*flags)
    assert (p.reference, p.ref_workers, p.learner_needs_reference) == (ref, workers, in_learner)


def test_spiral_plan():
    cfg, p = plan("--recipe", "spiral", "--steps", "5", "--generate_max_len", "64")
    assert (p.kl, p.reference, p.objective, p.epochs, p.updates_per_step, p.total_steps) == (
        "none",
        "none",
        "ppo_clip",
        2,
        2,
        10,
    )
    assert p.learner == {"loss_agg": "seq_sum_const", "loss_agg_const": 64.0, "temperature": 1.0}
    lc = learner_config(cfg, p)
    assert (lc.ppo_epochs, lc.total_steps, lc.loss_agg_const) == (2, 10, 64.0)
    _, p = plan("--recipe", "spiral", "--use_kl_loss", "--init_kl_coef", "0.05")
    assert (p.kl, p.kl_coef, p.reference) == ("loss", 0.05, "learner")


@pytest.mark.parametrize("recipe", ["spiral", "spell"])
def test_a_kl_in_the_reward_the_recipe_cannot_compute_is_refused(recipe):
    with pytest.raises(ConfigError, match=f"recipe '{recipe}' has no KL in the reward"):
        parse_args(
            ["--recipe", recipe, "--init_kl_coef", "0.1"]
            + (["--advantage_estimator", "reinforce"] if recipe == "spell" else [])
        )


def test_spin_plan():
    _, p = plan("--recipe", "spin", "--spin_mode", "online", "--ref_update", "steps:4", "--save_steps", "4")
    assert (p.kl, p.reference, p.objective) == ("none", "learner", "dpo")
    assert p.objective_args == {"beta": 0.1, "loss_type": "sigmoid", "label_smoothing": 0.0}
    assert plan("--recipe", "spin")[1].reference == "none"  # spin mode caches the reference's log-probs


def test_a_recipe_without_reward_kl_and_the_default_coefficient_has_none(monkeypatch):
    """A recipe that never mentions KL (the docs' toy) inherits init_kl_coef 1e-4: no one asked."""
    import serl.config.registry

    @dataclasses.dataclass
    class Toy(TrainConfig):
        RECIPE: ClassVar[str] = "toy"

    monkeypatch.setattr(serl.config.registry, "config_class", lambda name: Toy)
    assert kl_mode(Toy()) == "none"
    assert kl_mode(Toy(use_kl_loss=True)) == "loss"
    with pytest.raises(ConfigError, match="recipe 'toy' has no KL in the reward"):
        kl_mode(Toy(init_kl_coef=0.5))


def test_the_plan_travels_as_a_dict():
    _, p = plan("--use_kl_loss", "--train_batch_size", "8")
    assert RunPlan.from_dict(p.to_dict()) == p and p.train_batch_size == 8


@pytest.mark.parametrize("recipe", ["serl", "spell"])
def test_share_prompts_reaches_the_learner(recipe):
    cfg, p = plan("--recipe", recipe)
    assert not learner_config(cfg, p).share_prompts  # off by default
    cfg, p = plan("--recipe", recipe, "--share_prompts", "true")
    assert learner_config(cfg, p).share_prompts
