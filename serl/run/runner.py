"""The run around a recipe: run directory, config and resume, engines, metrics sinks, and the
run loop (``serl.run.loop.Loop``) with its hooks (``serl.run.hooks``). One runner serves every recipe;
Ray mode hands in its own engines (``run(..., engines=...)``).

``--resume RUN_DIR`` continues a run from its newest complete checkpoint: the same
recipe state, RNG states, data order and learning-rate position, so that (with the
transformers generator) the steps after it are the steps an uninterrupted run makes.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from serl import ConfigError, DataError, ModelError
from serl.config import registry
from serl.config.options import TrainConfig
from serl.config.plan import RunPlan, plan_run
from serl.data.lengths import run_tokenizer
from serl.engines.precision import Precision
from serl.engines.stop import stop_name
from serl.engines.vllm_quirks import EngineDied
from serl.models.resolve import resolve_model
from serl.report.progress import progress_mode
from serl.rewards import EquivalenceChecker
from serl.rewards.remote_reply import RemoteRewardError
from serl.run import guard as collapse_guard
from serl.run import hooks
from serl.run.checkpoint import DiskFullError, checkpoint_step, resume_hint
from serl.run.context import RunContext
from serl.run.damage import check_logs, intact_checkpoint
from serl.run.lock import LOCK_NAME, check_writable, lock_run_dir
from serl.run.loop import CtrlC, Interrupted, Loop, stopped_at_once
from serl.run.resume import write_config

log = logging.getLogger("serl")

# Exceptions that mean "the user's input is wrong", or a full disk the user must clear:
# one message, exit code 2.
USER_ERRORS = (ConfigError, DataError, ModelError, DiskFullError)
ERROR_LOG = "error.log"  # full tracebacks of errors the user sees as one message

LEFTOVERS = ("engine.log", ERROR_LOG)  # what a run that failed to start leaves: its directory may be used again


def new_run_dir(cfg: TrainConfig) -> Path:
    if cfg.run_dir:
        d = Path(cfg.run_dir)
        # a stale lock file, or what a failed start left, alone: the directory may be used again
        if d.exists() and any(p.name not in (*LEFTOVERS, LOCK_NAME) for p in d.iterdir()):
            raise ConfigError(
                f"run_dir: {d} already exists and is not empty "
                f"(use --resume {d} to continue it, or choose another directory)"
            )
        return d
    return Path("runs") / datetime.now().strftime(f"{cfg.recipe}-%Y%m%d-%H%M%S")


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` read and decided from the options, before anything is written."""

    run_dir: Path
    ckpt: Path | None  # the checkpoint a resume continues from
    done: int  # its step (0: a new run)
    mode: str  # the progress display (serl.report.progress)
    plan: RunPlan
    precision: Precision
    data: Any  # the recipe's prepare(cfg)
    model_path: str
    eval_set: Any
    probe: Any  # the collapse guard's (probe, anchor), or None


def prepare(cfg: TrainConfig, resume_dir: Path | None = None) -> Prepared:
    """Everything that can fail on bad input, before anything is written; the run reads
    what it decides here, not the options again."""
    run_dir = resume_dir or new_run_dir(cfg)
    check_writable(run_dir)  # before any model or tokenizer loads
    ckpt = intact_checkpoint(run_dir) if resume_dir else None  # a damaged newest one: skipped, named
    done = checkpoint_step(ckpt) if ckpt else 0
    if resume_dir:
        check_logs(run_dir, done)  # a bad line in metrics.jsonl or pool.jsonl: file:line, before the model loads
    mode = progress_mode(cfg.progress)
    plan = plan_run(cfg)
    spec = registry.config_class(cfg.recipe).SPEC
    recipe = registry.recipe_class(cfg.recipe)
    from serl.engines.factory import run_precision

    precision = run_precision(cfg)
    data = recipe.prepare(cfg)
    model_path = resolve_model(cfg.model)
    eval_set = recipe.eval_set(cfg)
    if cfg.save_best and not eval_set:
        raise ConfigError(
            f"save_best: {cfg.save_best} needs an evaluation during training (--eval_data or "
            f"--eval_benchmarks, or the recipe's own), and this run has none"
        )
    names = recipe.eval_metric_names(cfg, eval_set) if cfg.save_best else None
    if names is not None and cfg.save_best not in names:  # before the model loads, not after its first evaluation
        raise ConfigError(
            f"save_best: the evaluation has no metric {cfg.save_best!r}; it has: {', '.join(sorted(names))}"
        )
    probe = collapse_guard.load_probe(cfg, spec, data, model_path, run_dir)
    return Prepared(run_dir, ckpt, done, mode, plan, precision, data, model_path, eval_set, probe)


def take_lock(run_dir: Path, resume_dir: Path | None):
    """The run directory's lock, taken before any engine starts: a second writer (a --resume of a
    running run) is refused before it loads a model or starts a second vLLM engine beside the first."""
    return lock_run_dir(run_dir, new=not resume_dir, leftovers=LEFTOVERS)


def run(
    cfg: TrainConfig,
    resume_dir: Path | None = None,
    start_engines: Callable[[TrainConfig, RunPlan, str], Any] | None = None,
) -> Path:
    """Train ``cfg.recipe`` to ``cfg.steps``. ``start_engines(cfg, plan, model_path)``, when given,
    starts the engines in place of the local factory (Ray's actors, a test's stand-ins)."""
    p = prepare(cfg, resume_dir)  # bad input fails here, before anything is written
    run_dir, plan, model_path, mode = p.run_dir, p.plan, p.model_path, p.mode
    t_start = time.time()
    seed_process(cfg.seed, mode)
    tok = run_tokenizer(model_path)  # prepare()'s length checks loaded it already
    log.info("recipe %s, model %s, run directory %s", cfg.recipe, model_path, run_dir)
    log.info("%s", p.precision.line())
    route_engine_log(cfg, run_dir)  # before any engine starts (Ray's actors read it from their env)
    # only now: bad input never leaves a directory; the lock before any engine or write (serl.run.lock)
    lock = take_lock(run_dir, resume_dir)
    engines: Any  # the factory's, Ray's or a test's; wrapped below when the plan frames the step
    try:
        if start_engines is None:
            from serl.engines.factory import build_engines

            engines = build_engines(cfg, plan, model_path, tok, make_checker(cfg))
        else:
            engines = start_engines(cfg, plan, model_path)
    except BaseException:
        lock.release()
        raise
    loop, logger, finished = None, None, False  # loop: the report after the engines close
    recipe = None
    try:
        with CtrlC() as ctrl_c:
            try:
                if plan.framed:  # serl.run.async_frame: the recipe and the loop see recording (and gated) engines
                    from serl.run.async_frame import wrap_engines

                    engines = wrap_engines(cfg, plan, engines)
                logger = open_records(cfg, run_dir, resume_dir, p.done, p.precision)
                ctx = RunContext(
                    cfg,
                    run_dir,
                    model_path,
                    tok,
                    engines.generator,
                    engines.learner,
                    engines.checker,
                    logger,
                    mode,
                    resume_step=p.done,
                    resuming=resume_dir is not None,
                    plan=plan,
                )
                recipe = registry.recipe_class(cfg.recipe)(ctx, p.data)
                made = make_hooks(cfg, recipe, engines, run_dir, model_path, logger, p.probe, p.eval_set, mode)
                loop = Loop(
                    cfg,
                    plan,
                    engines,
                    recipe,
                    made,
                    run_dir=run_dir,
                    logger=logger,
                    progress=mode,
                    skipped_long=len(getattr(p.data, "skipped", ())),
                )
                loop.restore(p.ckpt)
                loop.run(ctrl_c)
                finished = True
            except EngineDied as e:
                keep_traceback(e, run_dir)
                if ctrl_c.requested:  # the engine went down with the signal that stops the run: say that
                    raise stopped_at_once(run_dir, ctrl_c.requested) from None
                raise
            except RemoteRewardError as e:  # the step that asked was not trained: say what the run keeps
                raise RemoteRewardError(f"{e}; {resume_hint(run_dir)}") from None
            except KeyboardInterrupt as e:  # a second Ctrl-C (or one before the loop): no traceback, say where
                raise stopped_at_once(run_dir, stop_name(e)) from None
    finally:  # after the handler is gone: a Ctrl-C while closing stops at once
        close(recipe, engines, logger)
        if not finished:  # an error ends the run here: another may take the directory
            lock.release()
    try:
        loop.closed(time.time() - t_start)  # the report and the summary (serl.run.hooks.Report)
    except KeyboardInterrupt as e:  # the training is done and saved: only the report is missing
        stopped = Interrupted(run_dir, "")
        stopped.args = (
            f"stopped by {stop_name(e)} while writing the report; the training finished and is saved "
            f"(serl report {run_dir} writes the report)",
        )
        raise stopped from None
    finally:
        lock.release()
    return run_dir


def make_checker(cfg: TrainConfig) -> EquivalenceChecker:
    """The math-equivalence checker of a single-process run (a process pool with hard per-check
    timeouts), handed to the engine factory with the rest; a Ray run's checkers are its reward actors."""
    return EquivalenceChecker(timeout=cfg.verify_timeout, workers=1)


def seed_process(seed: int, mode: str) -> None:
    """Seed the global RNGs; quiet transformers' per-load bars unless the progress ``mode`` is a bar."""
    if mode != "bar":
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    np.random.seed(seed)  # library code that draws from numpy's global RNG is seeded too
    import torch

    torch.manual_seed(seed)  # a Ray driver builds no learner that would seed it; its state is saved


def open_records(cfg: TrainConfig, run_dir: Path, resume_dir: Path | None, done: int, precision: Precision):
    """This start's records: the config (a new run), the precision chosen (a resume that chose
    differently says so) and the metrics sinks; a resume drops what was logged after ``done``."""
    from serl.engines.precision import record
    from serl.report.metrics import MetricsLogger

    if not resume_dir:
        write_config(cfg, run_dir)
    logger = MetricsLogger(
        run_dir,
        tensorboard_dir=cfg.use_tensorboard or None,
        use_wandb=cfg.use_wandb,
        wandb_project=cfg.wandb_project,
        wandb_run_name=cfg.wandb_run_name or run_dir.name,
        config=cfg.to_dict(),
        resume=resume_dir is not None,
    )
    if resume_dir:
        logger.truncate_after(done)
    note = record(run_dir, precision, done)
    if note:
        log.warning("resume: %s", note)
    return logger


def make_hooks(cfg, recipe, engines, run_dir: Path, model_path: str, logger, probe, eval_set, mode: str) -> list:
    """The loop's hooks (serl.run.hooks), in the order it calls them."""
    from serl.report.panels import Report, of_recipe

    made: list[hooks.Hook] = []
    if cfg.max_minutes:
        made.append(hooks.Budget(cfg.max_minutes))
    if probe is not None:  # --collapse_guard (serl.run.guard): checks between steps
        made.append(hooks.Guard(collapse_guard.CollapseGuard(cfg, recipe, engines, run_dir, model_path, logger, probe)))
    if eval_set:
        made.append(hooks.Evaluation(cfg, eval_set))
    made.append(hooks.Report(mode, (of_recipe(cfg.recipe) or Report()).line))  # the recipe's metrics after each step
    return made


def close(recipe, engines, logger) -> None:
    if recipe is not None:
        recipe.close()
    engines.close()
    if logger is not None:
        logger.close()


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
    """The full traceback goes to RUN_DIR/error.log; the user sees one message (serl.cli.train)."""

    try:
        path = run_dir / ERROR_LOG
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{datetime.now().isoformat(timespec='seconds')}\n{''.join(traceback.format_exception(e))}\n")
        e.log_path = path
    except OSError:
        pass  # the message itself still says what happened
