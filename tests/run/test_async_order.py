"""The loop's asynchronous step with stand-in engines (no model): collect(t+1) overlaps update t,
its learner calls wait for the update, the weight sync follows the collect, after_update(t) sees
collect(t)'s step-local state, and a checkpoint's collect-ahead state resumes the same steps."""

import threading
from types import SimpleNamespace

import pytest
import torch

from serl.config.plan import RunPlan
from serl.engines.base import Completion, Sampling, TrainBatch
from serl.recipes.base import Recipe
from serl.run.async_frame import FramedEngines, GatedLearner, RecordingGenerator
from serl.run.loop import Loop
from serl.run.step import Collected


class Gen:
    def __init__(self, log):
        self.log, self.weights = log, 0

    def generate(self, prompts, n, sampling):
        self.log.append(("generate", self.weights, sampling.logprobs))
        return [
            [Completion("x", [100 * self.weights + len(self.log)], list(p), logprobs=[-1.0]) for _ in range(n)]
            for p in prompts
        ]

    def load_weights(self, named):
        self.weights = next(iter(named))
        self.log.append(("sync", self.weights))


class Learner:
    def __init__(self, log):
        self.log, self.updates = log, 0

    def step(self, batch):
        self.updates += 1
        self.log.append(("update", self.updates, threading.current_thread() is threading.main_thread()))
        return {"actor/updates": float(self.updates)}

    def logprobs(self, prompts, responses):
        self.log.append(("logprobs", self.updates))
        return [torch.zeros(len(r)) for r in responses]

    def named_weights(self):
        return iter([self.updates])


class Toy(Recipe):
    def __init__(self, log, gen, learner):  # no RunContext: only what the loop touches
        self.log, self.generator, self.learner, self.progress = log, gen, learner, "quiet"

    def collect(self, step):
        self.log.append(("collect", step))
        groups = self.generator.generate([[step]], 2, Sampling(4, 1.0))
        self.learner.logprobs([[step]], [[1]])
        c = [x for g in groups for x in g]
        batch = TrainBatch([x.prompt_ids for x in c], [x.token_ids for x in c], [torch.ones(1)] * len(c))
        return Collected(batch, {}, {"tally": step})  # step-local: handed to this step's after_update

    def after_update(self, step, metrics, updated, local):
        self.log.append(("after", step, local["tally"]))
        metrics["tally"] = local["tally"]


class Carrying(Toy):
    """Trains, besides its own two samples, the first of the previous collect's (as SeRL's carried groups)."""

    def collect(self, step):
        got = super().collect(step)
        batch = got.batch
        last, self.last = getattr(self, "last", None), (batch.prompt_ids[0], batch.response_ids[0])
        if last is not None:
            got.batch = TrainBatch(batch.prompt_ids + [last[0]], batch.response_ids + [last[1]], batch.advantages * 2)
        return got


def _frame(steps, asynchronous=True, max_staleness=1, recipe=Toy):
    log = []
    learner = Learner(log)
    gen = RecordingGenerator(Gen(log), logprobs=True)
    gated = GatedLearner(learner) if asynchronous else learner
    r = recipe(log, gen, gated)
    plan = RunPlan("toy", async_train=asynchronous, max_staleness=max_staleness, is_cap=2.0)
    engines = FramedEngines(gen, gated, None, None, gated.gate if asynchronous else None)
    r.loop = Loop(SimpleNamespace(steps=steps), plan, engines, r)  # the test keeps it on the recipe
    return r, log


def test_order_and_step_state():
    r, log = _frame(3)
    out = [r.loop.train(s) for s in (1, 2, 3)]
    assert [m["tally"] for m in out] == [1, 2, 3]  # after_update(t) saw collect(t)'s tally
    assert [m["async/lag_max"] for m in out] == [0.0, 1.0, 1.0]
    names = [e[0] for e in log]
    assert names.count("collect") == 3  # nothing collected past the last step
    for t in (1, 2):
        c_next = log.index(("collect", t + 1))
        upd = log.index(next(e for e in log if e[0] == "update" and e[1] == t))
        after = log.index(next(e for e in log if e[0] == "after" and e[1] == t))
        sync = log.index(("sync", t))
        lp = next(i for i, e in enumerate(log) if i > c_next and e[0] == "logprobs")
        assert lp > upd and log[lp] == ("logprobs", t)  # the collect's learner call waited for update t
        assert sync > lp and after > sync  # sync after the collect; after_update last
    assert all(e[2] for e in log if e[0] == "update")  # the learner ran in the main thread only
    assert all(e[2] for e in log if e[0] == "generate")  # log-probs were asked for while collecting
    gens = [e[1] for e in log if e[0] == "generate"]
    assert gens == [0, 0, 1]  # collect(2) during update 1 still sampled version 0


@pytest.mark.parametrize("max_staleness", [1, 2])
def test_samples_older_than_max_staleness_are_not_trained(max_staleness):
    # collect(1) and collect(2) sample version 0 (collect(2) runs during update 1), collect(3) version 1.
    # Step 3 trains at version 2: its own samples lag 1, the one carried from collect(2) lags 2.
    r, log = _frame(3, max_staleness=max_staleness, recipe=Carrying)
    seen = []
    step = r.loop.engines.learner.step
    r.loop.engines.learner.step = lambda batch: seen.append(len(batch.response_ids)) or step(batch)
    out = [r.loop.train(s) for s in (1, 2, 3)]
    assert [m["async/lag_max"] for m in out] == [0.0, 1.0, float(max_staleness)]
    assert all(m["async/lag_max"] <= max_staleness for m in out)
    if max_staleness == 1:
        assert [m["async/dropped_stale"] for m in out] == [0.0, 0.0, 1.0]
        assert seen == [2, 3, 2]  # the stale carried sample never reached the learner
    else:
        assert [m["async/dropped_stale"] for m in out] == [0.0, 0.0, 0.0] and seen == [2, 3, 3]


def test_the_collect_ahead_state_resumes_the_same_steps():
    whole, _ = _frame(3)
    want = [whole.loop.train(s) for s in (1, 2, 3)]
    a, _ = _frame(3)
    got = [a.loop.train(s) for s in (1, 2)]
    state = a.loop.overlap.state_dict()
    assert state["ahead"]["step"] == 3
    b, log = _frame(3)
    b.loop.overlap.load_state_dict(state)
    b.learner.inner.updates = 2  # the checkpoint's policy
    b.generator.inner.weights = 2
    got.append(b.loop.train(3))
    strip = lambda ms: [{k: v for k, v in m.items() if not k.startswith("time/")} for m in ms]  # noqa: E731
    assert strip(got) == strip(want)
    assert ("collect", 3) not in log  # step 3 trained the batch collected before the checkpoint


def test_an_error_in_the_collect_thread_reaches_the_step():
    r, _ = _frame(3)
    r.loop.train(1)

    def boom(step):
        raise RuntimeError("collect failed")

    r.collect = boom
    with pytest.raises(RuntimeError, match="collect failed"):
        r.loop.train(2)
