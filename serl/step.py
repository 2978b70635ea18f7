"""The step frame every recipe shares; the recipe says only what is its own.

    batch, metrics = recipe.collect(step)        # the recipe: roll out, reward, build a batch
    learner.step(batch); sync the weights        # the frame (skipped when batch is None)
    recipe.after_update(step, metrics, updated)  # the recipe: bookkeeping after the update

Around it the frame times the step (``time/*``), offers the fault points that the SIGKILL
tests use (``generate`` as the step starts, ``learner`` before the update), and warns when a
step has nothing to train on. Mini-batching by ``--train_batch_size`` is the learner's.
"""
from __future__ import annotations

import logging
import time

from serl.checkpoint import fault_point
from serl.progress import stage

log = logging.getLogger("serl")


def run_step(recipe, step: int) -> dict[str, float]:
    """One training step of ``recipe``; returns its metrics. With --async_train or
    --importance_sampling_correction the runner gave the recipe a ``frame`` (serl.async_frame),
    which runs the same parts (``update``, ``nothing_to_train``, ``finish``) in another order."""
    if getattr(recipe, "frame", None) is not None:
        return recipe.frame.step(step)
    recipe.times = {}
    fault_point("generate", step)
    with recipe.timed("step"):
        batch, metrics = recipe.collect(step)
        if batch is not None:
            update(recipe, recipe.learner, batch, metrics, step, recipe.times)
            recipe.sync_weights()
        else:
            nothing_to_train(step)
        recipe.after_update(step, metrics, batch is not None)
    return finish(recipe, step, metrics)


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


def finish(recipe, step: int, metrics: dict) -> dict[str, float]:
    """The step is done: its metrics with the times (``time/*``)."""
    recipe.step_done = step
    return metrics | {f"time/{k}": v for k, v in recipe.times.items()}
