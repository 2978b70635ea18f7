"""The run loop: one object owns the run's steps. It is built whole from the config, the run's
plan (``serl.config.plan``), the engines, the recipe and its hooks (``serl.run.hooks``: the time
budget, the collapse guard, evaluation, the report), and runs every step itself::

    restore(checkpoint)                 policy, run state, collect-ahead and hooks, on a resume
    hooks.start
    for each step:
        hooks.blocks?  -> stop
        m = train(step)                 recipe.collect -> learner.step -> weight sync
                                        -> recipe.after_update, all timed (time/*)
        hooks.step_metrics; log m
        hooks.ends?    -> this is the last step
        hooks.after_step                evaluation, the step line
        checkpoint (every --save_steps, the last step, Ctrl-C)
    hooks.finish; the final model

The loop calls up into the recipe twice a step (``collect``, ``after_update``). Under
``plan.framed`` (--async_train, --importance_sampling_correction) it collects through
``serl.run.async_frame.Overlap``, which records what was sampled and may collect the next step
while this one updates; the update, the sync and the clock stay here.
"""

from __future__ import annotations

import copy
import logging
import time
from contextlib import nullcontext
from pathlib import Path

from serl.engines.stop import CtrlC, StepAbandoned, abandonable  # noqa: F401 (CtrlC: the runner's, from here)
from serl.report.progress import heartbeat, stage
from serl.run import state as run_state
from serl.run.async_frame import Overlap, checked
from serl.run.checkpoint import (
    disk_space_guard,
    fault_point,
    load_trainer_state,
    newest_step,
    restore_reference,
    save_checkpoint,
)
from serl.run.resume import run_config
from serl.run.step import nothing_to_train, start_times, timed, use_times

log = logging.getLogger("serl")


class Interrupted(Exception):
    """Ctrl-C or SIGTERM ended the run; ``serl train`` prints the message and exits 130."""

    def __init__(self, run_dir: Path, message: str):
        super().__init__(f"{message}; resume with serl train --resume {run_dir}")


def stopped_at_once(run_dir: Path, name: str = "Ctrl-C") -> Interrupted:
    """A second Ctrl-C (or one before the loop): say where the run stands, without a traceback."""
    kept = newest_step(run_dir) if run_dir.is_dir() else 0
    return Interrupted(
        run_dir, f"stopped by {name}" + (f"; the newest checkpoint is step {kept}" if kept else "; no checkpoint yet")
    )


class Loop:
    """Steps ``recipe`` from ``done + 1`` to ``cfg.steps`` on ``engines`` (generator, learner), calling
    ``hooks``; ``plan``: the run's ``RunPlan``. ``run_dir`` and ``logger`` are the run's (None: steps
    outside a run, ``Recipe.step``)."""

    def __init__(
        self,
        cfg,
        plan,
        engines,
        recipe,
        hooks=(),
        *,
        run_dir: Path | None = None,
        logger=None,
        progress: str = "quiet",
        skipped_long: int = 0,
    ):
        self.cfg, self.plan, self.engines, self.recipe = cfg, plan, engines, recipe
        self.hooks = tuple(hooks)
        self.run_dir, self.logger = run_dir, logger
        self.skipped_long = skipped_long  # rows prepare() left out as too long (serl.data.lengths)
        self.progress = progress  # the console's mode (serl.report.progress)
        # plan.framed: collect through the recorder (and under --async_train, ahead); else in this thread
        self.overlap = Overlap(recipe, engines, plan, cfg.steps) if plan is not None and plan.framed else None
        self.done = 0  # the last finished step: what a checkpoint saves
        self.before: dict | None = None  # the state after the step before, while a step runs (Ctrl-C)

    @property
    def home(self) -> Path:
        """The run directory, for what only a run (not a bare step) does: checkpoints, stops, the model."""
        if self.run_dir is None:
            raise RuntimeError("this Loop runs steps outside a run: it has no run directory")
        return self.run_dir

    def restore(self, ckpt: Path | None) -> None:
        """Continue from checkpoint ``ckpt`` (None: a fresh start)."""
        if ckpt is None:
            return
        learner = self.engines.learner
        learner.load(str(ckpt / "policy"))
        self.engines.generator.load_weights(learner.named_weights())
        state = run_state.restore(self.recipe, load_trainer_state(ckpt), self.overlap)
        self.done = state["step"]
        self.reload_reference()
        for h in self.hooks:
            if h.name:
                h.load_state_dict(state.get(h.name))
        log.info("resumed from %s: continuing at step %d", ckpt, self.done + 1)

    def reload_reference(self) -> None:
        """A reference the recipe refreshes every N steps (``plan.ref_every``) is, inside a window, the
        policy of the window's first checkpoint: load it there, then the policy of ``done`` again."""
        every = self.plan.ref_every
        ref = every * (self.done // every) if every else 0
        if ref not in (0, self.done):
            restore_reference(self.home, self.engines.learner, ref, self.done)

    def run(self, ctrl_c: CtrlC | None = None) -> None:
        """The steps, then the final model."""
        try:
            for h in self.hooks:
                h.start(self)
        except StepAbandoned as e:  # a stop during the evaluation before the first step: nothing to keep
            raise stopped_at_once(self.home, e.name) from None
        for step in range(self.done + 1, self.cfg.steps + 1):
            if any(h.blocks(self) for h in self.hooks):
                break
            try:
                last = self.step(step, ctrl_c)
            except StepAbandoned as e:  # the step was still collecting: the run keeps the one before
                raise self.abandoned(step, e.name) from None
            if ctrl_c is not None and ctrl_c.requested and not last:
                raise Interrupted(self.home, f"stopped by {ctrl_c.requested} after step {step} (checkpoint saved)")
            if last:
                break
        for h in self.hooks:
            h.finish(self)
        self.save_final()

    def step(self, step: int, ctrl_c: CtrlC | None = None) -> bool:
        """One step with its hooks and checkpoint; True when it is the run's last."""
        # what a checkpoint of the step before keeps, should a signal drop this one while it collects
        self.before = None
        if ctrl_c is not None and step > 1 and self.can_abandon():
            self.before = self.snapshot(step - 1)
        m = self.train(step)
        self.done = step
        if self.skipped_long:  # only when some were
            m["data/skipped_long"] = self.skipped_long
        for h in self.hooks:
            h.step_metrics(self, step, m)
        self.logger.log(step, m)
        last = step == self.cfg.steps
        for h in self.hooks:
            last = h.ends(self, step, m, last) or last
        for h in self.hooks:
            h.after_step(self, step, m, last)
        every = self.cfg.save_steps
        if last or (ctrl_c is not None and ctrl_c.requested) or (every and step % every == 0):
            self.save(step)
        return last

    # ---- the step itself ------------------------------------------------------------------
    def train(self, step: int) -> dict[str, float]:
        """One training step: collect, update, sync, after_update; its metrics with ``time/*``."""
        fault_point("generate", step)
        t0 = time.perf_counter()
        with heartbeat("step", self.progress):
            if self.overlap is None:
                times = start_times()
                with abandonable():  # a first Ctrl-C or SIGTERM drops the step here (serl.engines.stop)
                    got = checked(self.recipe.collect(step))
            else:
                taken = self.overlap.take(step)
                got, times = taken.got, taken.times
            batch, m = got.batch, got.metrics
            with self.overlap.beside(step, times) if self.overlap else nullcontext():  # collect(step + 1)
                if batch is not None:
                    self.update(batch, m, step, times)
            use_times(times)  # the sync and after_update count toward this step
            if batch is not None:
                self.sync()
            else:
                nothing_to_train(
                    step,
                    "every sample was filtered out, masked or stale"
                    if self.overlap
                    else "every sample was filtered out or masked",
                )
            self.recipe.after_update(step, m, batch is not None, got.local)
            if self.overlap is not None:
                self.overlap.prune()
        times["step"] = time.perf_counter() - t0
        return m | {f"time/{k}": v for k, v in times.items()}

    def update(self, batch, metrics: dict, step: int, times: dict) -> None:
        """``learner.step(batch)`` after the ``learner`` fault point; its metrics into ``metrics``,
        its wall time into ``times["learner"]``. Mini-batching by ``--train_batch_size`` is the learner's."""
        fault_point("learner", step)
        n, t0 = len(batch.response_ids), time.perf_counter()
        try:
            with stage("update", n, "seqs", self.progress) as st:
                metrics.update(self.engines.learner.step(batch))
                st.update(n)
        finally:
            times["learner"] = times.get("learner", 0.0) + time.perf_counter() - t0
        if self.overlap is not None:
            self.overlap.trained()

    def sync(self) -> None:
        """Serve the learner's new weights from the generator (``time/sync``)."""
        with timed("sync", self.progress):
            self.engines.generator.load_weights(self.engines.learner.named_weights())

    def save(self, step: int, state: dict | None = None) -> None:
        state = state or self.snapshot(step)
        save_checkpoint(
            self.home, step, self.engines.learner, state, keep=self.cfg.max_ckpt_num, run_config=run_config(self.cfg)
        )

    def snapshot(self, step: int) -> dict:
        """The run state after ``step``, copied: the recipe's own lists change as the next step runs."""
        state = run_state.capture(self.recipe, step, self.overlap)
        for h in self.hooks:
            if h.name:
                state[h.name] = h.state_dict()
        return copy.deepcopy(state)

    def can_abandon(self) -> bool:
        """Only a step collected in this thread, with the learner untouched, may be dropped."""
        return self.overlap is None

    def abandoned(self, step: int, name: str) -> Exception:
        """A signal dropped ``step`` while it collected: keep step - 1 (a checkpoint unless it has one)."""
        done, run_dir = step - 1, self.home
        if done >= 1 and newest_step(run_dir) != done and self.before is not None:
            self.save(done, self.before)
        if done >= 1 and newest_step(run_dir) == done:
            return Interrupted(run_dir, f"stopped by {name} after step {done} (checkpoint saved)")
        return stopped_at_once(run_dir, name)

    def save_final(self) -> None:
        """--save_model: weights, config, tokenizer (LoRA: the adapter; optimizer state stays in the
        checkpoints); --save_merged: the merged model."""
        learner, run_dir = self.engines.learner, self.home
        if self.cfg.save_model:
            with disk_space_guard(run_dir / "model", run_dir, "the final model"):
                learner.save(str(run_dir / "model"), state=False)
        if self.cfg.save_merged:
            with disk_space_guard(run_dir / "model_merged", run_dir, "the merged model"):
                learner.export_hf(str(run_dir / "model_merged"))

    def closed(self, secs: float) -> None:
        """The engines are closed: the hooks' last word (the report)."""
        for h in self.hooks:
            h.closed(self, secs)
