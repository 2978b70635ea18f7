"""The run loop: one object owns the run's steps. It drives the step frame (``serl.run.step.SyncFrame``,
or ``serl.run.async_frame.AsyncFrame`` with --async_train / --importance_sampling_correction), keeps the
run state (``serl.run.state``) and the checkpoints, and calls its hooks (``serl.run.hooks``: the time
budget, the collapse guard, evaluation, the report) at named points::

    restore(checkpoint)                 policy, run state, frame and hooks, on a resume
    hooks.start
    for each step:
        hooks.blocks?  -> stop
        m = frame.step(step)            collect, update, sync, after_update
        hooks.step_metrics; log m
        hooks.ends?    -> this is the last step
        hooks.after_step                evaluation, the step line
        checkpoint (every --save_steps, the last step, Ctrl-C)
    hooks.finish; the final model
"""
from __future__ import annotations

import copy
import logging
from pathlib import Path

from serl.run import state as run_state
from serl.run.checkpoint import disk_space_guard, load_trainer_state, newest_step, save_checkpoint
from serl.run.resume import run_config
from serl.run.stop import CtrlC, StepAbandoned  # noqa: F401 (CtrlC: the runner's, from here)

log = logging.getLogger("serl")


class Interrupted(Exception):
    """Ctrl-C or SIGTERM ended the run; ``serl train`` prints the message and exits 130."""

    def __init__(self, run_dir: Path, message: str):
        super().__init__(f"{message}; resume with serl train --resume {run_dir}")


def stopped_at_once(run_dir: Path, name: str = "Ctrl-C") -> Interrupted:
    """A second Ctrl-C (or one before the loop): say where the run stands, without a traceback."""
    kept = newest_step(run_dir) if run_dir.is_dir() else 0
    return Interrupted(run_dir, f"stopped by {name}" + (f"; the newest checkpoint is step {kept}" if kept
                                                        else "; no checkpoint yet"))


class Loop:
    """Steps ``recipe`` from ``done + 1`` to ``cfg.steps`` through ``frame``, calling ``hooks``."""

    def __init__(self, cfg, recipe, frame, engines, run_dir: Path, logger, hooks=(), skipped_long: int = 0):
        self.cfg, self.recipe, self.frame, self.engines = cfg, recipe, frame, engines
        self.run_dir, self.logger, self.hooks = run_dir, logger, list(hooks)
        self.skipped_long = skipped_long  # rows prepare() left out as too long (serl.data.lengths)
        self.done = 0                     # the last finished step: what a checkpoint saves
        self.before = None                # the state after the step before, while a step runs (Ctrl-C)

    def restore(self, ckpt: Path | None) -> None:
        """Continue from checkpoint ``ckpt`` (None: a fresh start)."""
        if ckpt is None:
            return
        learner = self.engines.learner
        learner.load(str(ckpt / "policy"))
        self.engines.generator.load_weights(learner.named_weights())
        state = run_state.restore(self.recipe, load_trainer_state(ckpt), self.run_dir, self.frame)
        self.done = state["step"]
        for h in self.hooks:
            if h.name:
                h.load_state_dict(state.get(h.name))
        log.info("resumed from %s: continuing at step %d", ckpt, self.done + 1)

    def run(self, ctrl_c: CtrlC | None = None) -> None:
        """The steps, then the final model."""
        try:
            for h in self.hooks:
                h.start(self)
        except StepAbandoned as e:  # a stop during the evaluation before the first step: nothing to keep
            raise stopped_at_once(self.run_dir, e.name) from None
        for step in range(self.done + 1, self.cfg.steps + 1):
            if any(h.blocks(self) for h in self.hooks):
                break
            try:
                last = self.step(step, ctrl_c)
            except StepAbandoned as e:  # the step was still collecting: the run keeps the one before
                raise self.abandoned(step, e.name) from None
            if ctrl_c is not None and ctrl_c.requested and not last:
                raise Interrupted(self.run_dir, f"stopped by {ctrl_c.requested} after step {step} (checkpoint saved)")
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
        m = self.frame.step(step)
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

    def save(self, step: int, state: dict | None = None) -> None:
        state = state or self.snapshot(step)
        save_checkpoint(self.run_dir, step, self.engines.learner, state, keep=self.cfg.max_ckpt_num,
                        run_config=run_config(self.cfg))

    def snapshot(self, step: int) -> dict:
        """The run state after ``step``, copied: the recipe's own lists change as the next step runs."""
        state = run_state.capture(self.recipe, step, self.frame)
        for h in self.hooks:
            if h.name:
                state[h.name] = h.state_dict()
        return copy.deepcopy(state)

    def can_abandon(self) -> bool:
        """Only the synchronous frame collects in this thread with the learner untouched."""
        from serl.run.step import SyncFrame

        return isinstance(self.frame, SyncFrame)

    def abandoned(self, step: int, name: str) -> Exception:
        """A signal dropped ``step`` while it collected: keep step - 1 (a checkpoint unless it has one)."""
        done = step - 1
        if done >= 1 and newest_step(self.run_dir) != done and self.before is not None:
            self.save(done, self.before)
        if done >= 1 and newest_step(self.run_dir) == done:
            return Interrupted(self.run_dir, f"stopped by {name} after step {done} (checkpoint saved)")
        return stopped_at_once(self.run_dir, name)

    def save_final(self) -> None:
        """--save_model: weights, config, tokenizer (LoRA: the adapter; optimizer state stays in the
        checkpoints); --save_merged: the merged model."""
        learner = self.engines.learner
        if self.cfg.save_model:
            with disk_space_guard(self.run_dir / "model", self.run_dir, "the final model"):
                learner.save(str(self.run_dir / "model"), state=False)
        if self.cfg.save_merged:
            with disk_space_guard(self.run_dir / "model_merged", self.run_dir, "the merged model"):
                learner.export_hf(str(self.run_dir / "model_merged"))

    def closed(self, secs: float) -> None:
        """The engines are closed: the hooks' last word (the report)."""
        for h in self.hooks:
            h.closed(self, secs)
