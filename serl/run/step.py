"""The synchronous step frame, and the step's clock, shared with ``serl.run.async_frame``.

    batch, metrics, local = recipe.collect(step)        # the recipe: roll out, reward, build a batch
    learner.step(batch); sync the weights               # the frame (skipped when batch is None)
    recipe.after_update(step, metrics, updated, local)  # the recipe: bookkeeping after the update

``local`` is what collect hands its own after_update (None when collect returns two values):
under --async_train the next collect runs before this step's after_update, so the recipe keeps
no step state on itself. Around it the frame times the step (``time/*``), offers the fault points
that the SIGKILL tests use (``generate`` as the step starts, ``learner`` before the update), and
warns when a step has nothing to train on. Mini-batching by ``--train_batch_size`` is the learner's.
"""
from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from contextvars import ContextVar

from serl.run.checkpoint import fault_point
from serl.run.stop import abandonable
from serl.report.progress import heartbeat, stage

log = logging.getLogger("serl")

# The step's wall times by part (logged as time/NAME). A context variable, not the recipe's:
# the async frame's collect thread fills its own dict while the main thread updates.
_TIMES: ContextVar[dict | None] = ContextVar("serl_step_times", default=None)


def start_times() -> dict:
    """A fresh dict of this thread's (context's) step times, returned."""
    times: dict = {}
    _TIMES.set(times)
    return times


def use_times(times: dict) -> None:
    _TIMES.set(times)


@contextmanager
def timed(name: str, progress: str = "quiet"):
    """Add the block's wall time to the step's ``time/NAME``; a long block says it is still running
    (``serl.report.progress.heartbeat``, plain mode). Outside a step the time goes nowhere."""
    t0 = time.perf_counter()
    try:
        with heartbeat(name, progress):
            yield
    finally:
        times = _TIMES.get()
        if times is not None:
            times[name] = times.get(name, 0.0) + time.perf_counter() - t0


def collect(recipe, step: int):
    """``recipe.collect(step)`` as (batch, metrics, local): a recipe without step-local state returns two."""
    got = recipe.collect(step)
    return (*got, None) if len(got) == 2 else tuple(got)


class SyncFrame:
    """One training step: collect, update, sync, after_update. Holds nothing between steps."""

    def __init__(self, recipe, learner=None):
        self.recipe, self.learner = recipe, learner if learner is not None else recipe.learner

    def step(self, step: int) -> dict[str, float]:
        r = self.recipe
        times = start_times()
        fault_point("generate", step)
        with timed("step", r.progress):
            with abandonable():  # a first Ctrl-C or SIGTERM drops the step here (serl.run.stop)
                batch, metrics, local = collect(r, step)
            if batch is not None:
                update(r, self.learner, batch, metrics, step, times)
                r.sync_weights()
            else:
                nothing_to_train(step)
            r.after_update(step, metrics, batch is not None, local)
        return finish(metrics, times)

    def state_dict(self) -> dict | None:
        return None  # nothing between steps

    def load_state_dict(self, state: dict) -> None:
        pass


def update(recipe, learner, batch, metrics: dict, step: int, times: dict) -> None:
    """``learner.step(batch)`` after the ``learner`` fault point, its metrics into ``metrics`` and
    its wall time added to ``times["learner"]``."""
    fault_point("learner", step)
    n, t0 = len(batch.response_ids), time.perf_counter()
    try:
        with stage("update", n, "seqs", recipe.progress) as st:
            metrics.update(learner.step(batch))
            st.update(n)
    finally:
        times["learner"] = times.get("learner", 0.0) + time.perf_counter() - t0


def nothing_to_train(step: int, why: str = "every sample was filtered out or masked") -> None:
    log.warning("step %d: nothing to train on (%s); no update this step", step, why)


def finish(metrics: dict, times: dict) -> dict[str, float]:
    """The step is done: its metrics with the times (``time/*``)."""
    return metrics | {f"time/{k}": v for k, v in times.items()}
