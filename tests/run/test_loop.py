"""The run loop (serl.run.loop.Loop) with a stand-in step: the order of its hook points, the steps
that get a checkpoint, and a hook that makes a step the last. (The step itself: tests/run/test_step.py.)"""

from types import SimpleNamespace

from serl.run.hooks import Hook
from serl.run.loop import Loop


class Frame:
    def __init__(self):
        self.steps = []

    def step(self, step):
        self.steps.append(step)
        return {"x": float(step)}


class Logger:
    def __init__(self):
        self.rows = []

    def log(self, step, m):
        self.rows.append((step, dict(m)))


class Seen(Hook):
    def __init__(self, log, stop_at=None):
        self.log, self.stop_at = log, stop_at

    def start(self, loop):
        self.log.append(("start", loop.done))

    def blocks(self, loop):
        self.log.append(("blocks", loop.done))
        return False

    def step_metrics(self, loop, step, m):
        self.log.append(("metrics", step))
        m["seen"] = 1.0

    def ends(self, loop, step, m, last):
        self.log.append(("ends", step, last))
        return step == self.stop_at

    def after_step(self, loop, step, m, last):
        self.log.append(("after", step, last))

    def finish(self, loop):
        self.log.append(("finish", loop.done))


def _loop(monkeypatch, hooks, steps=2, save_steps=0):
    saved = []
    monkeypatch.setattr(Loop, "save", lambda self, step: saved.append(step))
    monkeypatch.setattr(Loop, "save_final", lambda self: saved.append("final"))
    monkeypatch.setattr(Loop, "train", lambda self, step: self.recipe.step(step))  # the stand-in's step
    loop = Loop(SimpleNamespace(steps=steps, save_steps=save_steps), None, None, Frame(), hooks, logger=Logger())
    return loop, saved


def test_the_hook_points_in_order(monkeypatch):
    log = []
    loop, saved = _loop(monkeypatch, [Seen(log)])
    loop.run()
    step = lambda s, last: [("blocks", s - 1), ("metrics", s), ("ends", s, last), ("after", s, last)]  # noqa: E731
    assert log == [("start", 0), *step(1, False), *step(2, True), ("finish", 2)]
    assert loop.logger.rows == [(1, {"x": 1.0, "seen": 1.0}), (2, {"x": 2.0, "seen": 1.0})]
    assert saved == [2, "final"] and loop.done == 2


def test_a_hook_ends_the_run_after_its_step_with_a_checkpoint(monkeypatch):
    log = []
    loop, saved = _loop(monkeypatch, [Seen(log, stop_at=2), Seen([])], steps=5, save_steps=0)
    loop.run()
    assert loop.recipe.steps == [1, 2] and saved == [2, "final"]
    assert ("after", 2, True) in log  # the hooks after it see the step as the last


def test_checkpoints_every_save_steps_and_at_the_end(monkeypatch):
    loop, saved = _loop(monkeypatch, [], steps=5, save_steps=2)
    loop.run()
    assert saved == [2, 4, 5, "final"]
