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

from serl.checkpoint import fault_point
from serl.progress import stage

log = logging.getLogger("serl")


def run_step(recipe, step: int) -> dict[str, float]:
    """One training step of ``recipe``; returns its metrics. With --async_train or
    --importance_sampling_correction the runner gave the recipe a ``frame`` (serl.async_frame)."""
    if getattr(recipe, "frame", None) is not None:
        return recipe.frame.step(step)
    recipe.times = {}
    fault_point("generate", step)
    with recipe.timed("step"):
        batch, metrics = recipe.collect(step)
        if batch is not None:
            fault_point("learner", step)
            n = len(batch.response_ids)
            with recipe.timed("learner"), stage("update", n, "seqs", recipe.progress) as st:
                metrics.update(recipe.learner.step(batch))
                st.update(n)
            recipe.sync_weights()
        else:
            log.warning("step %d: nothing to train on (every sample was filtered out or masked); "
                        "no update this step", step)
        recipe.after_update(step, metrics, batch is not None)
    recipe.step_done = step
    return metrics | {f"time/{k}": v for k, v in recipe.times.items()}
