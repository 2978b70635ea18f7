"""The run loop's step (serl.run.loop.Loop.train) around every recipe: what it calls in which order, the step
with nothing to train on, and --train_batch_size, which now sets the optimizer steps of
every recipe (the learner's mini-batches), checked on each recipe's own stand-in engines."""

import importlib.util
import math
from pathlib import Path

import pytest
import torch

from serl.config.plan import plan_run
from serl.engines.base import TrainBatch
from serl.engines.factory import learner_config
from serl.engines.learner_core import LearnerCore
from serl.recipes.base import Recipe
from serl.recipes.serl.config import SerlConfig
from serl.run.context import RunContext
from serl.run.step import Collected

TESTS = Path(__file__).resolve().parents[1]


class Calls:
    def __init__(self):
        self.log = []

    def step(self, batch):
        self.log.append(("learner.step", len(batch.response_ids)))
        return {"actor/updates": 1.0}

    def named_weights(self):
        self.log.append(("named_weights",))
        return iter(())

    def load_weights(self, weights):
        self.log.append(("load_weights",))


class Toy(Recipe):
    def __init__(self, ctx, batch):
        super().__init__(ctx)
        self.batch = batch

    def collect(self, step):
        self.learner.log.append(("collect", step))
        return Collected(self.batch, {"toy/x": 1.0})

    def after_update(self, step, metrics, updated, local=None):
        self.learner.log.append(("after_update", step, updated, dict(metrics)))


def _toy(batch):
    calls = Calls()
    ctx = RunContext(SerlConfig(), Path("."), "m", None, calls, calls, None, None, "quiet")
    return Toy(ctx, batch), calls


def test_the_loop_collects_updates_syncs_then_calls_after_update():
    recipe, calls = _toy(TrainBatch([[1], [1]], [[2], [3]], [torch.ones(1)] * 2))
    m = recipe.step(4)
    assert calls.log == [
        ("collect", 4),
        ("learner.step", 2),
        ("named_weights",),
        ("load_weights",),
        ("after_update", 4, True, {"toy/x": 1.0, "actor/updates": 1.0}),
    ]
    assert m["toy/x"] == 1.0 and not hasattr(recipe, "step_done")  # the loop counts the steps
    assert {"time/step", "time/learner", "time/sync"} <= set(m)


def test_nothing_to_train_skips_the_update_and_warns(caplog):
    recipe, calls = _toy(None)
    with caplog.at_level("WARNING", logger="serl"):
        m = recipe.step(2)
    assert calls.log == [("collect", 2), ("after_update", 2, False, {"toy/x": 1.0})]
    assert "step 2: nothing to train on" in caplog.text and "time/learner" not in m


def test_fault_points_kill_at_generate_then_learner(monkeypatch):
    recipe, calls = _toy(TrainBatch([[1]], [[2]], [torch.ones(1)]))
    seen = []
    monkeypatch.setattr("serl.run.loop.fault_point", lambda name, step: seen.append((name, step, len(calls.log))))
    recipe.step(3)
    assert seen == [("generate", 3, 0), ("learner", 3, 1)]  # before collect; after it, before the update


def test_collect_must_return_collected():
    class Tuple(Toy):
        def collect(self, step):
            return None, {}

    calls = Calls()
    recipe = Tuple(RunContext(SerlConfig(), Path("."), "m", None, calls, calls, None, None, "quiet"), None)
    with pytest.raises(TypeError, match="must return serl.run.step.Collected"):
        recipe.step(1)


# ---- --train_batch_size in every recipe ---------------------------------------------------------
class MiniBatching(LearnerCore):
    """The real learner's mini-batching (LearnerCore.step) over a recipe's stand-in learner:
    each optimizer step is recorded instead of run."""

    def __init__(self, inner, cfg):
        self.inner, self.cfg, self.updates, self.skipped_total, self.parts = inner, cfg, 0, 0, []

    def logprobs(self, prompt_ids, response_ids, model="policy"):
        return [torch.zeros(len(r)) for r in response_ids]

    def named_weights(self):
        return self.inner.named_weights()

    def sync_ref(self):
        self.inner.sync_ref()

    def _step(self, batch, obj, epochs):
        self.updates += epochs
        self.parts.append(len(batch.response_ids))
        return {
            "actor/updates": float(self.updates),
            "actor/skipped_total": 0.0,
            "actor/skipped": 0.0,
            "actor/tokens": float(sum(map(len, batch.response_ids))),
        }


def _harness(recipe_dir: str, module: str):
    spec = importlib.util.spec_from_file_location(f"_harness_{module}", TESTS / "recipes" / recipe_dir / f"{module}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _serl(tmp_path, size):
    h = _harness("serl", "test_serl_refill")
    return h.make(tmp_path, "--train_batch_size", str(size), "--max_refill_rounds", "1")[0]


def _spin(tmp_path, size):
    h = _harness("spin", "test_spin_recipe")
    return h.make(tmp_path, "--train_batch_size", str(size), "--epochs_per_iteration", "1")[0]


def _spiral(tmp_path, size):
    h = _harness("spiral", "test_spiral_recipe")
    return h.make(
        tmp_path,
        "--games",
        "tictactoe",
        "--games_per_step",
        "4",
        "--filter_zero_adv",
        "false",
        "--mask_truncated",
        "false",
        "--train_batch_size",
        str(size),
    )[0]


def _spell(tmp_path, size):
    h = _harness("spell", "test_spell_recipe_batch")
    recipe = h.make_recipe(tmp_path, train_batch_size=size)
    return recipe


@pytest.mark.parametrize("build", [_serl, _spin, _spiral, _spell], ids=["serl", "spin", "spiral", "spell"])
def test_train_batch_size_sets_the_optimizer_steps_of_every_recipe(tmp_path, build):
    steps = {}
    for size in (0, 2):
        (tmp_path / str(size)).mkdir()
        recipe = build(tmp_path / str(size), size)
        lc = learner_config(recipe.cfg, plan_run(recipe.cfg))
        assert lc.mini_batch_size == size  # the flag reaches the learner
        recipe.learner = MiniBatching(recipe.learner, lc)
        m = recipe.step(1)
        parts, epochs = recipe.learner.parts, lc.ppo_epochs
        seqs = sum(parts) // (1 if size == 0 else epochs)  # the batch the recipe collected
        assert seqs > 0, m  # the step trained something
        if size == 0:
            assert parts == [seqs] and "actor/steps" not in m
        else:  # 2 sequences an optimizer step (one pair for SPIN's DPO), every epoch
            assert len(parts) == epochs * math.ceil(seqs / 2) == m["actor/steps"] and max(parts) == 2
        steps[size] = m["actor/updates"]
    assert steps[2] > steps[0] == lc.ppo_epochs


# ---- issue 60's bars: the path from Loop.run to optimizer.step, and the up-calls a step makes ----
def _path_and_upcalls(tiny_path, recipe_cls):
    """Run one loop step with the real torch learner; the serl files on the stack when the optimizer
    steps (from Loop.run on), and the recipe's methods the loop called (by name, in order)."""
    import sys
    import traceback
    from types import SimpleNamespace

    from serl.engines.learner_core import LearnerConfig
    from serl.engines.torch_learner import TorchLearner
    from serl.run.loop import Loop

    learner = TorchLearner(
        tiny_path, LearnerConfig(actor_learning_rate=1e-2, lr_warmup_ratio=0.0, total_steps=10, seed=0), need_ref=False
    )
    stacks, step = [], learner.optimizer.step
    learner.optimizer.step = lambda *a, **k: stacks.append(traceback.extract_stack()) or step(*a, **k)
    gen = SimpleNamespace(load_weights=lambda w: list(w))
    batch = TrainBatch([[3, 4, 5], [6, 7]], [[20, 21], [22, 23, 24]], [torch.ones(2), -torch.ones(3)])
    recipe = recipe_cls(RunContext(SerlConfig(), Path("."), "m", None, gen, learner, None, None, "quiet"), batch)
    logger = SimpleNamespace(log=lambda step, m: None)
    loop = Loop(
        SerlConfig(steps=1, save_steps=0), None, SimpleNamespace(generator=gen, learner=learner), recipe, logger=logger
    )
    loop.save = loop.save_final = lambda *a: None
    serl_dir = str(Path(__file__).resolve().parents[2] / "serl")
    calls = []

    def profile(frame, event, arg):  # a call into the recipe from the run's own code
        if (
            event == "call"
            and frame.f_locals.get("self") is recipe
            and frame.f_back is not None
            and frame.f_back.f_code.co_filename.startswith(serl_dir + "/run/")
        ):
            calls.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        loop.run()
    finally:
        sys.setprofile(None)
    (stack,) = stacks
    start = next(i for i, f in enumerate(stack) if f.name == "run" and f.filename.endswith("serl/run/loop.py"))
    files = list(
        dict.fromkeys(f.filename[len(serl_dir) + 1 :] for f in stack[start:] if f.filename.startswith(serl_dir))
    )
    return files, calls


class Plain(Recipe):
    def __init__(self, ctx, batch):
        super().__init__(ctx)
        self.batch = batch

    def collect(self, step):
        return Collected(self.batch, {})


def test_from_loop_run_to_the_optimizer_step_is_three_files_and_two_up_calls(tiny_path):
    files, calls = _path_and_upcalls(tiny_path, Plain)
    assert files == ["run/loop.py", "engines/learner_core.py", "engines/torch_learner.py"]
    assert calls == ["collect", "after_update"]  # the loop calls up into the recipe twice a step
