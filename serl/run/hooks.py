"""What the run loop (``serl.run.loop.Loop``) calls at named points: the time budget, the collapse
guard, evaluation (with --save_best) and the report. A new concern is a new ``Hook``; the loop
itself does not change.

The points, in the order the loop reaches them (each hook in list order):

    start(loop)                       after a resume's restore, before the first step
    blocks(loop) -> bool              before each step: True ends the run (the hook says why)
    step_metrics(loop, step, m)       the step's metrics, before they are logged
    ends(loop, step, m, last) -> bool after logging: True makes this the last step
    after_step(loop, step, m, last)   the step is decided (evaluation, the step line)
    finish(loop)                      the steps are over (not after an error)
    closed(loop, secs)                the engines are closed (the report)

A hook with a ``name`` is saved in each checkpoint's run state under that name.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

log = logging.getLogger("serl")

# With --max_minutes: minutes of training steps used so far, logged each step; a resume
# reads it back from metrics.jsonl so the budget spans the interruption.
BUDGET_KEY = "budget/minutes_used"
_now = time.monotonic  # the budget's clock (tests replace it)


class Hook:
    name: str | None = None  # its entry in the checkpoint's run state (None: nothing kept)

    def start(self, loop) -> None: ...

    def blocks(self, loop) -> bool:
        return False

    def step_metrics(self, loop, step: int, m: dict) -> None: ...

    def ends(self, loop, step: int, m: dict, last: bool) -> bool:
        return False

    def after_step(self, loop, step: int, m: dict, last: bool) -> None: ...

    def finish(self, loop) -> None: ...

    def closed(self, loop, secs: float) -> None: ...

    def state_dict(self) -> dict | None:
        return None

    def load_state_dict(self, state: dict | None) -> None: ...


class Budget(Hook):
    """--max_minutes: the wall time of training steps (evaluation and checkpoints not counted)."""

    def __init__(self, minutes: float):
        self.minutes, self.budget, self.used, self.t0 = minutes, minutes * 60, 0.0, 0.0

    def start(self, loop) -> None:
        self.used = budget_used(loop.run_dir, loop.done) * 60 if loop.done else 0.0

    def blocks(self, loop) -> bool:
        if self.used >= self.budget:  # a resume of a run that had spent its budget
            log.info("wall-clock budget of %g min was spent by step %d; no more steps", self.minutes, loop.done)
            return True
        self.t0 = _now()
        return False

    def step_metrics(self, loop, step: int, m: dict) -> None:
        self.used += _now() - self.t0
        m[BUDGET_KEY] = self.used / 60

    def ends(self, loop, step: int, m: dict, last: bool) -> bool:
        if self.used < self.budget:
            return False
        log.info(
            "wall-clock budget of %g min reached after step %d (%.1f min of training steps); stopping",
            self.minutes,
            step,
            self.used / 60,
        )
        return True


def budget_used(run_dir: Path, step: int) -> float:
    """Minutes of training steps a run had used by ``step`` (its ``BUDGET_KEY`` in
    metrics.jsonl); 0, with a warning, when that step did not log it."""
    from serl.report.metrics import read_steps

    for s, line in reversed(read_steps(Path(run_dir) / "metrics.jsonl")):
        if s == step and BUDGET_KEY in (row := json.loads(line)):
            return float(row[BUDGET_KEY])
    log.warning(
        "%s: step %d logged no %s (the run had no --max_minutes); the wall-clock budget counts from this resume",
        run_dir,
        step,
        BUDGET_KEY,
    )
    return 0.0


class Guard(Hook):
    """--collapse_guard (``serl.run.guard.CollapseGuard``): signals each step, a check between steps."""

    name = "guard"

    def __init__(self, guard):
        self.guard = guard

    def start(self, loop) -> None:
        self.guard.start(loop.done)

    def blocks(self, loop) -> bool:
        if self.guard.st.stopped:  # a resume of a run the guard ended
            log.info("the collapse guard stopped this run at step %d; no more steps", loop.done)
        return self.guard.st.stopped

    def step_metrics(self, loop, step: int, m: dict) -> None:
        m.update(self.guard.signals(m))

    def ends(self, loop, step: int, m: dict, last: bool) -> bool:
        stopped = self.guard.check(step, final=last) == "stop"
        m.update(self.guard.last_metrics)
        return stopped

    def finish(self, loop) -> None:
        if self.guard.st.stopped:  # the final model is the guard's kept policy
            log.info("the final model is the collapse guard's kept policy (step %d)", self.guard.st.best_step)

    def state_dict(self) -> dict:
        return self.guard.state_dict()

    def load_state_dict(self, state: dict | None) -> None:
        self.guard.load_state_dict(state)


class Evaluation(Hook):
    """Evaluation before training, every --eval_steps and after the last step; --save_best keeps
    the best policy (``serl.run.best``)."""

    def __init__(self, cfg, problems):
        self.cfg, self.problems, self.keeper = cfg, problems, None

    def start(self, loop) -> None:
        if self.cfg.save_best:  # checked against the first evaluation's metrics
            from serl.report.summary import direction
            from serl.run.best import BestKeeper

            self.keeper = BestKeeper(self.cfg.save_best, loop.run_dir, direction(self.cfg.save_best))
        if loop.done == 0:
            from serl.engines.stop import abandonable

            with abandonable():  # nothing trained yet: a stop need not wait for it
                got = evaluate(loop.recipe, self.problems, loop.logger, 0)
            if self.keeper is not None:
                self.keeper.check(got)

    def after_step(self, loop, step: int, m: dict, last: bool) -> None:
        if not (last or (self.cfg.eval_steps and step % self.cfg.eval_steps == 0)):
            return
        got = evaluate(loop.recipe, self.problems, loop.logger, step)
        m.update(got)
        if self.keeper is not None and self.keeper.offer(step, got, loop.engines.learner):
            log.info(
                "best %s so far: %.4g at step %d (RUN_DIR/best)", self.cfg.save_best, got[self.cfg.save_best], step
            )


def evaluate(recipe, problems, logger, step: int) -> dict:
    """``recipe.evaluate`` with every RNG put back afterwards, logged at ``step``."""
    from serl.report.progress import stage
    from serl.report.summary import save_items, save_records
    from serl.run.state import isolated_rng

    n = len(problems) if hasattr(problems, "__len__") else None  # SPELL's held-out set is no list
    with isolated_rng(recipe), stage("evaluation", n, "items", getattr(recipe, "progress", "quiet")) as st:
        metrics = recipe.evaluate(problems, step)  # evaluating (or not) never changes what training samples
        st.update(n or 0)
    log.info("evaluation: %s", ", ".join(f"{k} {v:.3f}" for k, v in metrics.items()))
    logger.log(step, metrics)
    if getattr(logger, "run_dir", None) is not None:  # per-problem results, for the paired summary
        save_items(logger.run_dir, step, getattr(recipe, "eval_items", None) or {})
        save_records(logger.run_dir, step, getattr(recipe, "eval_records", None) or [])
    return metrics


class Report(Hook):
    """The line after each step (the recipe's metrics: ``serl.report.panels``), and the report and the
    summary once the run is closed."""

    def __init__(self, mode: str, line):
        self.mode, self.line = mode, line

    def after_step(self, loop, step: int, m: dict, last: bool) -> None:
        from serl.report.progress import print_step_summary

        print_step_summary(step, m, self.mode, line=self.line)

    def closed(self, loop, secs: float) -> None:
        try:
            if loop.cfg.report:  # off: `serl report RUN_DIR` draws it later
                from serl.report.write import write_report

                write_report(loop.run_dir)
        except Exception as e:  # a report problem must not hide a finished run
            log.warning("could not write the report: %s", e)
        from serl.report.summary import print_summary
        from serl.run.best import best_line

        print_summary(loop.run_dir, secs, notes=(best_line(loop.run_dir),), report=loop.cfg.report)
