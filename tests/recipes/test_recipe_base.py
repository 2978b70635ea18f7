"""The recipe base: one place for the run's sampling, which every recipe's generation reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from serl.config.parser import parse_args
from serl.engines.base import Sampling
from serl.recipes.base import Recipe
from serl.run.context import RunContext


class Recorder:
    """A generator that records its calls and answers nothing (plumbing only)."""

    def __init__(self):
        self.calls = []

    def generate(self, prompts, n, sampling):
        self.calls.append((prompts, n, sampling))
        return [[] for _ in prompts]


def recipe(*flags):
    cfg, _ = parse_args(list(flags))
    ctx = RunContext(
        cfg=cfg,
        run_dir=Path("."),
        model_path="m",
        tokenizer=None,
        generator=Recorder(),
        learner=None,
        checker=None,
        logger=None,
        plan=object(),
    )
    return Recipe(ctx)


@pytest.mark.parametrize(
    "kwargs,expected",
    [
        ({}, Sampling(max_new_tokens=96, temperature=0.7, top_p=0.9)),
        ({"max_new_tokens": 12}, Sampling(max_new_tokens=12, temperature=0.7, top_p=0.9)),
        ({"temperature": 0.0}, Sampling(max_new_tokens=96, temperature=0.0, top_p=0.9)),
        ({"top_p": 1.0}, Sampling(max_new_tokens=96, temperature=0.7, top_p=1.0)),
        ({"seed": 5}, Sampling(max_new_tokens=96, temperature=0.7, top_p=0.9, seed=5)),
    ],
)
def test_sampling_reads_the_run_and_its_overrides(kwargs, expected):
    r = recipe("--generate_max_len", "96", "--temperature", "0.7", "--top_p", "0.9")
    assert r.sampling(**kwargs) == expected


def test_sample_passes_the_runs_sampling_and_skips_an_empty_call():
    r = recipe("--generate_max_len", "96", "--temperature", "0.7", "--top_p", "0.9")
    assert r.sample([], 4) == [] and r.generator.calls == []
    assert r.sample([[1, 2], [3]], 4, 20, 1.2) == [[], []]
    assert r.generator.calls == [([[1, 2], [3]], 4, Sampling(max_new_tokens=20, temperature=1.2, top_p=0.9))]


def test_the_recipe_interface_is_eight_methods_and_the_rest_is_final():
    """What a recipe may override (issue 60: at most eight); the helpers are typing.final."""
    import inspect

    from serl.recipes.base import Recipe

    own = {n: v for n, v in vars(Recipe).items() if not n.startswith("__") and callable(getattr(Recipe, n))}
    final = {n for n, v in own.items() if getattr(inspect.unwrap(getattr(v, "__func__", v)), "__final__", False)}
    assert sorted(set(own) - final) == sorted(
        ["prepare", "eval_set", "collect", "after_update", "state_dict", "load_state_dict", "evaluate", "close"]
    )
    assert final == {"eval_metric_names", "step", "timed", "sampling", "sample", "chat_prompt", "group_batch"}
