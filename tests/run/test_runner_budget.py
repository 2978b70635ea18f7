"""--max_minutes: the runner stops after the step that reaches the wall-clock budget of
training steps, with a checkpoint, and a resume counts what was used before it.

Engines and recipe are stand-ins and the budget's clock is a counter that each step
advances, so the step at which a run stops is exact."""

import json
from types import SimpleNamespace

import pytest

import serl.config.registry
import serl.run.hooks as hooks
import serl.run.runner as runner
from serl.config.registry import config_class
from serl.recipes.base import Recipe
from serl.run.checkpoint import latest_checkpoint
from serl.run.step import Collected


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


class FakeLearner:
    def save(self, path):
        from pathlib import Path

        Path(path).mkdir(parents=True)
        (Path(path) / "weights.txt").write_text("w")

    def load(self, path):
        self.loaded = path

    def named_weights(self):
        return []


def fake_engines(cfg, plan, model_path):
    return SimpleNamespace(
        generator=SimpleNamespace(load_weights=lambda w: None), learner=FakeLearner(), checker=None, close=lambda: None
    )


def fake_recipe(clock, seconds_per_step, loaded):
    class Steps(Recipe):
        @classmethod
        def eval_set(cls, cfg):
            return []

        def collect(self, step):  # nothing to train: the loop skips the update
            clock.t += seconds_per_step
            self.done = step
            return Collected(None, {"fake/x": float(step)})

        def state_dict(self):
            return {"step": self.done}

        def load_state_dict(self, state):
            loaded.append(state)
            self.done = state["step"]  # the loop snapshots the state before the next step collects

    return Steps


@pytest.fixture
def setup(monkeypatch, smol_path, tmp_path):
    def make(seconds_per_step):
        clock, loaded = Clock(), []
        monkeypatch.setattr(hooks, "_now", clock)
        monkeypatch.setattr(
            serl.config.registry, "recipe_class", lambda name: fake_recipe(clock, seconds_per_step, loaded)
        )
        monkeypatch.setattr("serl.report.write.write_report", lambda run_dir: None)  # plots are not under test
        return loaded

    def cfg(**kw):
        base = dict(
            model=smol_path, steps=20, run_dir=str(tmp_path / "run"), save_steps=0, save_model=False, progress="quiet"
        )
        return config_class("serl")(**(base | kw))

    return make, cfg, tmp_path / "run"


def rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def ckpt_step(run_dir):
    return int(latest_checkpoint(run_dir).name.split("_")[1])


# 1 minute: 20 s steps reach 60 s exactly at step 3; 25 s steps pass it at step 3 (75 s);
# a 61 s step is over at once; 7 s steps pass it at step 9 (63 s)
@pytest.mark.parametrize("secs,stop", [(20, 3), (25, 3), (61, 1), (7, 9)])
def test_stops_after_the_step_that_reaches_the_budget(setup, secs, stop):
    make, cfg, run_dir = setup
    make(secs)
    runner.run(cfg(max_minutes=1.0), start_engines=fake_engines)
    r = rows(run_dir)
    assert [x["step"] for x in r] == list(range(1, stop + 1))
    assert [x[hooks.BUDGET_KEY] for x in r] == pytest.approx([secs * s / 60 for s in range(1, stop + 1)])
    assert ckpt_step(run_dir) == stop  # saved at the stop although save_steps is 0


def test_no_budget_runs_every_step_and_logs_no_budget(setup):
    make, cfg, run_dir = setup
    make(1000)
    runner.run(cfg(steps=4), start_engines=fake_engines)
    r = rows(run_dir)
    assert [x["step"] for x in r] == [1, 2, 3, 4] and not any(hooks.BUDGET_KEY in x for x in r)
    assert ckpt_step(run_dir) == 4


def test_resume_counts_the_minutes_used_before(setup):
    make, cfg, run_dir = setup
    loaded = make(20)
    runner.run(cfg(max_minutes=1.0), start_engines=fake_engines)
    assert ckpt_step(run_dir) == 3
    # budget spent: no further step
    runner.run(cfg(max_minutes=1.0), resume_dir=run_dir, start_engines=fake_engines)
    assert [x["step"] for x in rows(run_dir)] == [1, 2, 3] and loaded == [{"step": 3}]
    # one more minute: three more 20 s steps
    runner.run(cfg(max_minutes=2.0), resume_dir=run_dir, start_engines=fake_engines)
    r = rows(run_dir)
    assert [x["step"] for x in r] == [1, 2, 3, 4, 5, 6]
    assert [x[hooks.BUDGET_KEY] for x in r[3:]] == pytest.approx([4 / 3, 5 / 3, 2.0])
    assert ckpt_step(run_dir) == 6


def test_resume_of_a_run_without_budget_counts_from_the_resume(setup, caplog):
    make, cfg, run_dir = setup
    make(30)
    runner.run(cfg(steps=2), start_engines=fake_engines)
    runner.run(cfg(max_minutes=1.0), resume_dir=run_dir, start_engines=fake_engines)
    assert [x["step"] for x in rows(run_dir)] == [1, 2, 3, 4]
    assert "counts from this resume" in caplog.text


@pytest.mark.parametrize("value", [-1.0, -0.01])
def test_negative_budget_refused(value):
    from serl import ConfigError

    with pytest.raises(ConfigError, match="max_minutes"):
        config_class("serl")(max_minutes=value).validate()


def test_rows_prepare_skipped_as_too_long_are_counted_in_each_step(setup, monkeypatch):
    """data/skipped_long is the runner's: the rows a recipe's prepare() left out as too long
    (serl.data.lengths), logged with every step, and absent when none were."""
    make, cfg, run_dir = setup
    make(1)
    steps = serl.config.registry.recipe_class("serl")

    class Fitted(list):
        skipped = [("seeds.jsonl:2", "prompt of 5000 tokens"), ("seeds.jsonl:7", "prompt of 4000 tokens")]

    class Skipping(steps):
        @classmethod
        def prepare(cls, cfg):
            return Fitted()

    monkeypatch.setattr(serl.config.registry, "recipe_class", lambda name: Skipping)
    runner.run(cfg(steps=2), start_engines=fake_engines)
    assert [x["data/skipped_long"] for x in rows(run_dir)] == [2, 2]
    monkeypatch.setattr(serl.config.registry, "recipe_class", lambda name: steps)
    runner.run(cfg(steps=1, run_dir=str(run_dir.parent / "other")), start_engines=fake_engines)
    assert "data/skipped_long" not in rows(run_dir.parent / "other")[0]
