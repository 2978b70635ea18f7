"""serl.run.state: the run state in one place (step, RNGs, the generator's position, the
recipe's own state), older checkpoints' flat layout read as the new one, and evaluation
that leaves every RNG where it was."""

import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from serl.distributed.groups import GeneratorGroup
from serl.run import state as run_state


class Gen:
    """Counts calls, as the real generators do (their sampling seed is seed and count)."""

    def __init__(self):
        self.calls = 0

    def state_dict(self):
        return {"calls": self.calls}

    def load_state_dict(self, state):
        self.calls = state.get("calls", 0)


class Rec:
    """The parts of a recipe the run state touches."""

    def __init__(self, seed=0, reference=None):
        self.rng, self.generator, self.own = random.Random(seed), Gen(), {"k": 0}
        self.reference, self.learner, self.run_dir = reference, None, None

    def state_dict(self):
        return dict(self.own)

    def load_state_dict(self, state):
        self.own = dict(state)


def test_capture_then_restore_continues_every_draw():
    a = Rec()
    a.generator.calls, a.own = 9, {"k": 3}
    a.rng.random()
    np.random.seed(1)
    torch.manual_seed(2)
    state = run_state.capture(a, 4)
    want = (a.rng.random(), float(np.random.rand()), float(torch.rand(1)))
    b = Rec(seed=5)
    np.random.seed(7)
    torch.manual_seed(8)
    got = run_state.restore(b, state)
    assert (got["step"], b.generator.calls, b.own) == (4, 9, {"k": 3}) and got["layout"] == 2
    assert (b.rng.random(), float(np.random.rand()), float(torch.rand(1))) == want


def test_a_layout_1_checkpoint_still_loads():
    """Before run_state, each recipe saved one flat dict with its own keys beside these."""
    r = Rec()
    r.rng.random()
    old = {
        "step": 3,
        "rng": r.rng.getstate(),
        "torch_rng": torch.get_rng_state(),
        "generator_calls": 7,
        "order": [2, 0],
        "memory": {"x": 1},
        "guard": {"g": 1},
    }
    b = Rec(seed=9)
    state = run_state.restore(b, old)
    assert state["step"] == 3 and b.generator.calls == 7 and b.own == {"order": [2, 0], "memory": {"x": 1}}
    assert b.rng.getstate() == r.rng.getstate() and state["guard"] == {"g": 1} and state["numpy_rng"] is None
    with pytest.raises(ValueError, match="layout 3"):
        run_state.upgrade({"layout": 3})


def test_evaluation_leaves_every_rng_and_the_generator_where_they_were():
    r = Rec()
    r.generator.calls = 5
    before = (r.rng.getstate(), torch.get_rng_state(), np.random.get_state()[1].copy())
    with run_state.isolated_rng(r):
        r.rng.random(), torch.rand(3), np.random.rand(2)
        r.generator.calls += 4
    assert r.generator.calls == 5 and r.rng.getstate() == before[0]
    assert torch.equal(torch.get_rng_state(), before[1]) and np.array_equal(np.random.get_state()[1], before[2])


def test_a_generator_without_state_dict_gives_its_call_count():
    g = SimpleNamespace(calls=3)
    assert run_state.generator_state(g) == {"calls": 3}
    run_state.load_generator_state(g, {"calls": 8})
    assert g.calls == 8 and run_state.generator_state(SimpleNamespace()) == {}


class _Remote:
    def __init__(self, fn):
        self.remote = fn


class _Engine:
    """A stand-in for a GeneratorWorker actor handle: methods with ``.remote``."""

    def __init__(self, calls):
        self.calls = calls
        self.state_dict = _Remote(lambda: {"calls": self.calls})
        self.load_state_dict = _Remote(lambda s: setattr(self, "calls", s.get("calls", 0)))


def test_generator_group_saves_and_restores_each_engine(monkeypatch):
    """Under --ray each engine keeps its own call count (it seeds that engine's samples)."""
    monkeypatch.setitem(__import__("sys").modules, "ray", SimpleNamespace(get=lambda x: x))
    group = GeneratorGroup([_Engine(3), _Engine(5)])
    state = group.state_dict()
    assert state == {"engines": [{"calls": 3}, {"calls": 5}]}
    fresh = GeneratorGroup([_Engine(0), _Engine(0)])
    fresh.load_state_dict(state)
    assert [e.calls for e in fresh.engines] == [3, 5]
    fresh.load_state_dict({"calls": 2})  # a one-process state: every engine from it
    assert [e.calls for e in fresh.engines] == [2, 2]


def test_a_batch_collected_ahead_is_not_dropped_silently():
    """An --async_train checkpoint holds the batch collected for the next step; a resume with no
    frame (neither --async_train nor the correction) would never train it, so it is refused."""
    from serl import ConfigError

    a = Rec()
    frame = SimpleNamespace(state_dict=lambda: {"version": 2, "versions": {}, "lps": {}, "ahead": {"step": 3}})
    state = run_state.capture(a, 2, frame)
    assert state["frame"]["ahead"] == {"step": 3}
    with pytest.raises(ConfigError, match="collected ahead; resume it with --async_train"):
        run_state.restore(Rec(), state)
    frame = SimpleNamespace(state_dict=lambda: {"version": 2, "versions": {}, "lps": {}, "ahead": None})
    run_state.restore(Rec(), run_state.capture(a, 3, frame))  # nothing ahead (the last step): no frame needed
