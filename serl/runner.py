"""The run around a recipe: run directory, config and resume, engines, the step loop with
evaluation and checkpoints, metrics sinks, progress, and the report. One runner serves
every recipe; Ray mode hands in its own engines (``run(..., engines=...)``).

``--resume RUN_DIR`` continues a run from its newest complete checkpoint: the same
recipe state, RNG states, data order and learning-rate position, so that (with the
transformers generator) the steps after it are the steps an uninterrupted run makes.
"""
from __future__ import annotations

import json
import logging
import time
from datetime import datetime
from pathlib import Path

import numpy as np

from serl.checkpoint import DiskFullError
from serl.config import ConfigError, TrainConfig
from serl.data.lengths import run_tokenizer
from serl.data.seeds import DataError
from serl.engines.vllm_quirks import EngineDied
from serl.eval.sets import eval_split, load_eval_sets  # noqa: F401 (their old home)
from serl.models import ModelError, resolve_model
from serl.resume import resume_config, run_config, write_config  # noqa: F401 (resume_config: serl.train's API)
from serl.run_lock import LOCK_NAME, check_writable, lock_run_dir
from serl.rewards.remote_reply import RemoteRewardError

log = logging.getLogger("serl")

# Exceptions that mean "the user's input is wrong", or a full disk the user must clear:
# one message, exit code 2.
USER_ERRORS = (ConfigError, DataError, ModelError, DiskFullError)
ERROR_LOG = "error.log"  # full tracebacks of errors the user sees as one message

# With --max_minutes: minutes of training steps used so far, logged each step; a resume
# reads it back from metrics.jsonl so the budget spans the interruption.
BUDGET_KEY = "budget/minutes_used"
_now = time.monotonic  # the budget's clock (tests replace it)


LEFTOVERS = ("engine.log", ERROR_LOG)  # what a run that failed to start leaves: its directory may be used again


class Interrupted(Exception):
    """Ctrl-C ended the run; ``serl train`` prints the message and exits 130."""

    def __init__(self, run_dir: Path, message: str):
        super().__init__(f"{message}; resume with serl train --resume {run_dir}")


class _CtrlC:
    """The first Ctrl-C (SIGINT) asks the run to stop after the step in progress, with a
    checkpoint; a second one stops at once (KeyboardInterrupt), from the newest checkpoint.
    Only in the main thread (elsewhere signals cannot be caught)."""

    def __init__(self):
        self.requested = False
        self.previous = None

    def __enter__(self):
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def _on_sigint(self, signum, frame):
        import signal

        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the next one raises KeyboardInterrupt
        log.warning("Ctrl-C: stopping after this step, with a checkpoint (Ctrl-C again to stop at once)")

    def __exit__(self, *exc):
        import signal

        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
        return False


def new_run_dir(cfg: TrainConfig) -> Path:
    if cfg.run_dir:
        d = Path(cfg.run_dir)
        # a stale lock file, or what a failed start left, alone: the directory may be used again
        if d.exists() and any(p.name not in (*LEFTOVERS, LOCK_NAME) for p in d.iterdir()):
            raise ConfigError(f"run_dir: {d} already exists and is not empty "
                              f"(use --resume {d} to continue it, or choose another directory)")
        return d
    return Path("runs") / datetime.now().strftime(f"{cfg.recipe}-%Y%m%d-%H%M%S")


def prepare(cfg: TrainConfig, run_dir: Path | None = None):
    """Everything that can fail on bad input, before anything is written:
    (recipe data, model path, eval problems, run dir)."""
    from serl.recipes import recipe_class

    run_dir = run_dir or new_run_dir(cfg)
    check_writable(run_dir)  # before any model or tokenizer loads
    recipe = recipe_class(cfg.recipe)
    data = recipe.prepare(cfg)
    model_path = resolve_model(cfg.model)
    eval_set = recipe.eval_set(cfg)
    if cfg.save_best and not eval_set:
        raise ConfigError(f"save_best: {cfg.save_best} needs an evaluation during training (--eval_data or "
                          f"--eval_benchmarks, or the recipe's own), and this run has none")
    return data, model_path, eval_set, run_dir


def run(cfg: TrainConfig, resume_dir: Path | None = None, engines=None, prepared=None, plan=None) -> Path:
    """Train ``cfg.recipe`` to ``cfg.steps``; ``engines`` (Ray) replaces the local ones, and
    ``prepared`` / ``plan`` what the Ray driver already read and decided."""
    from serl import guard as collapse_guard
    from serl.plan import plan_run
    from serl.recipes import recipe_class

    data, model_path, eval_set, run_dir = prepared or prepare(cfg, resume_dir)  # fail fast, before heavy imports
    plan = plan or plan_run(cfg)
    recipe_cls = recipe_class(cfg.recipe)
    probe = collapse_guard.prepare(cfg, recipe_cls, data, model_path, run_dir)  # None: no guard
    from serl import run_state
    from serl.checkpoint import (disk_space_guard, latest_checkpoint, load_trainer_state, newest_step,
                                 save_checkpoint)
    from serl.engines.factory import build_engines
    from serl.metrics import MetricsLogger
    from serl.panels import of_recipe
    from serl.progress import print_step_summary, progress_mode
    from serl.recipes.base import RunContext

    mode = progress_mode(cfg.progress)
    step_line = of_recipe(cfg.recipe).line  # the recipe's metrics on the line after each step (serl.panels)
    if mode != "bar":  # transformers' per-load bars are noise in plain logs
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    t_start = time.time()
    np.random.seed(cfg.seed)  # library code that draws from numpy's global RNG is seeded too
    import torch

    torch.manual_seed(cfg.seed)  # a Ray driver builds no learner that would seed it; its state is saved
    ckpt = latest_checkpoint(run_dir) if resume_dir else None
    done = newest_step(run_dir) if ckpt else 0
    tok = run_tokenizer(model_path)  # prepare()'s length checks loaded it already
    log.info("recipe %s, model %s, run directory %s", cfg.recipe, model_path, run_dir)
    if engines is None:
        route_engine_log(cfg, run_dir)
    engines = engines or build_engines(cfg, plan, model_path, tok)
    recipe, logger, guard, lock, finished = None, None, None, None, False
    evals: dict[int, dict] = {}
    history = []
    ctrl_c = _CtrlC().__enter__()
    try:
        # only now: bad input never leaves a directory; the lock before any write (serl.run_lock)
        lock = lock_run_dir(run_dir, new=not resume_dir, leftovers=LEFTOVERS)  # engine.log is routed first
        if not resume_dir:
            write_config(cfg, run_dir)
        logger = MetricsLogger(run_dir, tensorboard_dir=cfg.use_tensorboard or None,
                               use_wandb=cfg.use_wandb, wandb_project=cfg.wandb_project,
                               wandb_run_name=cfg.wandb_run_name or run_dir.name, config=cfg.to_dict(),
                               resume=resume_dir is not None)
        if resume_dir:
            logger.truncate_after(done)
        gen, learner = engines.generator, engines.learner
        if plan.framed:  # the step of serl.async_frame: the recipe is given wrapped engines
            from serl.async_frame import attach_frame, wrap_engines

            gen, learner = wrap_engines(cfg, plan, gen, learner)
        ctx = RunContext(cfg, run_dir, model_path, tok, gen, learner, engines.checker,
                         logger, mode, resume_step=done, resuming=resume_dir is not None, plan=plan)
        recipe = recipe_cls(ctx, data)
        if plan.framed:
            attach_frame(recipe, plan, engines.learner)
        if probe is not None:  # --collapse_guard (serl.guard): checks between steps
            from serl.guard import CollapseGuard

            guard = CollapseGuard(cfg, recipe, engines, run_dir, model_path, logger, probe)
        if ckpt is not None:
            engines.learner.load(str(ckpt / "policy"))
            engines.generator.load_weights(engines.learner.named_weights())
            state = run_state.restore(recipe, load_trainer_state(ckpt), run_dir)
            if guard is not None:
                guard.load_state_dict(state.get("guard"))
            log.info("resumed from %s: continuing at step %d", ckpt, done + 1)
        if guard is not None:
            guard.start(done)
        keeper = None
        if cfg.save_best:  # --save_best (serl.best): checked against the first evaluation's metrics
            from serl.best import BestKeeper
            from serl.summary import direction

            keeper = BestKeeper(cfg.save_best, run_dir, direction(cfg.save_best))
        if eval_set and done == 0:
            evals[0] = _evaluate(recipe, eval_set, logger, 0)
            if keeper is not None:
                keeper.check(evals[0])
        budget = cfg.max_minutes * 60
        used = budget_used(run_dir, done) * 60 if budget and done else 0.0
        skipped_long = len(getattr(data, "skipped", ()))
        for step in range(done + 1, cfg.steps + 1):
            if budget and used >= budget:  # a resume of a run that had spent its budget
                log.info("wall-clock budget of %g min was spent by step %d; no more steps", cfg.max_minutes, done)
                break
            if guard is not None and guard.st.stopped:  # a resume of a run the guard ended
                log.info("the collapse guard stopped this run at step %d; no more steps", done)
                break
            t0 = _now()
            m = recipe.step(step)
            recipe.step_done = step  # what the run state saves, also for a recipe with its own step
            used += _now() - t0
            out_of_time = bool(budget) and used >= budget
            if budget:
                m[BUDGET_KEY] = used / 60
            if skipped_long:  # rows prepare() left out as too long (serl.data.lengths); only when some were
                m["data/skipped_long"] = skipped_long
            if guard is not None:
                m.update(guard.signals(m))
            logger.log(step, m)
            last = step == cfg.steps or out_of_time
            stopped = guard is not None and guard.check(step, final=last) == "stop"
            if guard is not None:
                m.update(guard.last_metrics)
            last = last or stopped
            if eval_set and (last or (cfg.eval_steps and step % cfg.eval_steps == 0)):
                evals[step] = _evaluate(recipe, eval_set, logger, step)
                m.update(evals[step])
                if keeper is not None and keeper.offer(step, evals[step], engines.learner):
                    log.info("best %s so far: %.4g at step %d (RUN_DIR/best)", cfg.save_best,
                             evals[step][cfg.save_best], step)
            history.append(m)
            print_step_summary(step, m, mode, line=step_line)
            if last or ctrl_c.requested or (cfg.save_steps and step % cfg.save_steps == 0):
                state = run_state.capture(recipe)
                if guard is not None:
                    state["guard"] = guard.state_dict()
                save_checkpoint(run_dir, step, engines.learner, state, keep=cfg.max_ckpt_num,
                                run_config=run_config(cfg))
            if ctrl_c.requested and not last:
                raise Interrupted(run_dir, f"stopped by Ctrl-C after step {step} (checkpoint saved)")
            if stopped:
                break
            if out_of_time:
                log.info("wall-clock budget of %g min reached after step %d (%.1f min of training steps); "
                         "stopping", cfg.max_minutes, step, used / 60)
                break
        if guard is not None and guard.st.stopped:  # the final model is the guard's kept policy
            log.info("the final model is the collapse guard's kept policy (step %d)", guard.st.best_step)
        if cfg.save_model:  # weights, config, tokenizer (LoRA: the adapter); optimizer state stays in checkpoints
            with disk_space_guard(run_dir / "model", run_dir, "the final model"):
                engines.learner.save(str(run_dir / "model"), state=False)
        if cfg.save_merged:
            with disk_space_guard(run_dir / "model_merged", run_dir, "the merged model"):
                engines.learner.export_hf(str(run_dir / "model_merged"))
        finished = True
    except EngineDied as e:
        keep_traceback(e, run_dir)
        raise
    except RemoteRewardError as e:  # the step that asked was not trained: say what the run keeps
        raise e.at_run(run_dir) from None
    except KeyboardInterrupt:  # a second Ctrl-C (or one before the loop): no traceback, say where it stands
        kept = newest_step(run_dir) if run_dir.is_dir() else 0
        raise Interrupted(run_dir, "stopped by Ctrl-C" + (f"; the newest checkpoint is step {kept}" if kept
                                                          else "; no checkpoint yet")) from None
    finally:
        ctrl_c.__exit__()
        if recipe is not None:
            recipe.close()
        engines.close()
        if logger is not None:
            logger.close()
        if lock is not None and not finished:  # an error ends the run here: another may take the directory
            lock.release()
    try:
        summarise(run_dir, history, evals, time.time() - t_start)
    finally:
        if lock is not None:
            lock.release()
    return run_dir


def budget_used(run_dir: Path, step: int) -> float:
    """Minutes of training steps a run had used by ``step`` (its ``BUDGET_KEY`` in
    metrics.jsonl); 0, with a warning, when that step did not log it."""
    from serl.metrics import read_steps

    for s, line in reversed(read_steps(Path(run_dir) / "metrics.jsonl")):
        if s == step and BUDGET_KEY in (row := json.loads(line)):
            return float(row[BUDGET_KEY])
    log.warning("%s: step %d logged no %s (the run had no --max_minutes); the wall-clock budget "
                "counts from this resume", run_dir, step, BUDGET_KEY)
    return 0.0


def _evaluate(recipe, problems, logger, step: int) -> dict:
    from serl.run_state import isolated_rng
    from serl.summary import save_items

    from serl.progress import stage

    n = len(problems) if hasattr(problems, "__len__") else None  # SPELL's held-out set is no list
    with isolated_rng(recipe), stage("evaluation", n, "items", getattr(recipe, "progress", "quiet")) as st:
        metrics = recipe.evaluate(problems)  # evaluating (or not) never changes what training samples
        st.update(n or 0)
    log.info("evaluation: %s", ", ".join(f"{k} {v:.3f}" for k, v in metrics.items()))
    logger.log(step, metrics)
    if getattr(logger, "run_dir", None) is not None:  # per-problem results, for the paired summary
        save_items(logger.run_dir, step, getattr(recipe, "eval_items", None) or {})
    return metrics


def route_engine_log(cfg: TrainConfig, run_dir: Path) -> None:
    """vLLM's own lines to RUN_DIR/engine.log unless --show_engine_warnings (serl.engines.engine_log)."""
    from serl.engines.engine_log import ENGINE_LOG, route_to
    from serl.engines.vllm_generator import vllm_available

    kind = getattr(cfg, "generator", "hf")
    if cfg.show_engine_warnings or kind == "hf" or (kind == "auto" and not vllm_available()):
        return
    run_dir.mkdir(parents=True, exist_ok=True)  # a start that fails leaves only LEFTOVERS here
    route_to(run_dir / ENGINE_LOG)
    log.info("vLLM's own log lines go to %s (--show_engine_warnings prints them here)", run_dir / ENGINE_LOG)


def keep_traceback(e: EngineDied, run_dir: Path) -> None:
    """The full traceback goes to RUN_DIR/error.log; the user sees one message (serl.train)."""
    import traceback

    try:
        path = run_dir / ERROR_LOG
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{datetime.now().isoformat(timespec='seconds')}\n{''.join(traceback.format_exception(e))}\n")
        e.log_path = path
    except OSError:
        pass  # the message itself still says what happened


def summarise(run_dir: Path, history: list[dict], evals: dict[int, dict], secs: float) -> None:
    """The report, then the summary of what changed (``serl.summary``, from the run directory)."""
    try:
        from serl.report import write_report

        write_report(run_dir)
    except Exception as e:  # a report problem must not hide a finished run
        log.warning("could not write the report: %s", e)
    from serl.summary import print_summary

    print_summary(run_dir, secs)
