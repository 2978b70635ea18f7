"""`serl train`: validate inputs, build the parts, run the loop, checkpoint, summarise.

``--resume RUN_DIR`` continues a run from its newest complete checkpoint: the same
pool, RNG states, data order and learning-rate position, so that (with the
transformers generator) the steps after it are the steps an uninterrupted run makes.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from datetime import datetime
from pathlib import Path

from serl.config import ConfigError, TrainConfig, dump, load_yaml, parse_args
from serl.data.seeds import DataError, read_seeds
from serl.models import ModelError, load_tokenizer, resolve_model

log = logging.getLogger("serl")

# Exceptions that mean "the user's input is wrong": one message, exit code 2.
USER_ERRORS = (ConfigError, DataError, ModelError)

# Changing one of these on resume would make it a different run.
RUN_DEFINING = ("model", "prompt_data", "input_key", "label_key", "max_samples", "seed",
                "advantage_estimator", "reward_mode", "n_samples_per_prompt", "rollout_batch_size",
                "enable_self_evolution", "reward_difficulty_bounds", "init_kl_coef", "use_kl_loss",
                "gamma", "actor_learning_rate", "replay_window", "generator", "learner", "train_batch_size")


def _new_run_dir(cfg: TrainConfig) -> Path:
    if cfg.run_dir:
        d = Path(cfg.run_dir)
        if d.exists() and any(d.iterdir()):
            raise ConfigError(f"run_dir: {d} already exists and is not empty "
                              f"(use --resume {d} to continue it, or choose another directory)")
        return d
    return Path("runs") / datetime.now().strftime("serl-%Y%m%d-%H%M%S")


def prepare(cfg: TrainConfig, run_dir: Path | None = None):
    """Everything that can fail on bad input, before anything is written."""
    seeds = read_seeds(cfg.prompt_data, cfg.input_key, cfg.label_key or None,
                       limit=cfg.max_samples or None)
    model_path = resolve_model(cfg.model)
    return seeds, model_path, load_eval_sets(cfg), run_dir or _new_run_dir(cfg)


def load_eval_sets(cfg: TrainConfig) -> list:
    """Held-out labelled problems (--eval_data) and benchmark files, as eval problems."""
    from serl.eval.data import DataError as EvalDataError, MathProblem, load_math_benchmark

    problems = []
    if cfg.eval_data:
        rows = read_seeds(cfg.eval_data, cfg.input_key, cfg.label_key or None,
                          limit=cfg.eval_samples or None)
        unlabelled = [i for i, r in enumerate(rows) if r.label is None]
        if unlabelled:
            raise DataError(f"{cfg.eval_data}: row {unlabelled[0] + 1} has no '{cfg.label_key}' "
                            f"(held-out problems need labels)")
        problems += [MathProblem(benchmark="heldout", idx=i, question=r.text, gold=r.label)
                     for i, r in enumerate(rows)]
    names = [n.strip() for n in cfg.eval_benchmarks.split(",") if n.strip()]
    if names and not cfg.eval_data_dir:
        raise ConfigError("eval_benchmarks: needs --eval_data_dir")
    try:
        for name in names:
            problems += load_math_benchmark(cfg.eval_data_dir, name, cfg.eval_limit or None)
    except EvalDataError as e:
        raise DataError(str(e)) from e
    return problems


def resume_config(run_dir: Path, argv: list[str]) -> TrainConfig:
    """The saved config, with flags given now applied; refuses run-defining changes."""
    saved_file = run_dir / "config.yaml"
    if not saved_file.is_file():
        raise ConfigError(f"--resume {run_dir}: no config.yaml there (not a serl run directory)")
    saved = TrainConfig(**load_yaml(str(saved_file)))
    cfg, _ = parse_args(["--config", str(saved_file), *argv])
    cfg.run_dir = str(run_dir)
    changed = {f.name: (getattr(saved, f.name), getattr(cfg, f.name))
               for f in dataclasses.fields(cfg) if getattr(saved, f.name) != getattr(cfg, f.name)}
    bad = {k: v for k, v in changed.items() if k in RUN_DEFINING}
    if bad:
        k, (was, now) = next(iter(bad.items()))
        raise ConfigError(f"--resume: option '{k}' was {was!r} in {saved_file}, now {now!r}; "
                          f"that makes it a different run (start a new run directory instead)")
    if changed:
        with open(run_dir / "config_changes.jsonl", "a") as f:
            f.write(json.dumps({"time": datetime.now().isoformat(timespec="seconds"),
                                "changes": {k: {"was": a, "now": b} for k, (a, b) in changed.items()}},
                               default=str) + "\n")
        dump(cfg, saved_file)
        log.info("resume with changed options: %s", ", ".join(changed))
    return cfg


def run(cfg: TrainConfig, resume_dir: Path | None = None) -> Path:
    seeds, model_path, eval_set, run_dir = prepare(cfg, resume_dir)  # fail fast, before heavy imports

    from serl.checkpoint import latest_checkpoint, load_trainer_state, save_checkpoint
    from serl.instruct import PromptPool
    from serl.instruct.pool import POOL_FILE
    from serl.metrics import MetricsLogger
    from serl.progress import print_step_summary, progress_mode
    from serl.trainer import Trainer, evaluate, make_generator, make_learner

    mode = progress_mode(cfg.progress)
    if mode != "bar":  # transformers' per-load bars are noise in plain logs
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    t_start = time.time()
    ckpt = latest_checkpoint(run_dir) if resume_dir else None
    tok = load_tokenizer(model_path)
    log.info("model %s, %d seed problems, run directory %s", model_path, len(seeds), run_dir)
    generator = make_generator(cfg, model_path, tok)
    learner = make_learner(cfg, model_path, tok)
    run_dir.mkdir(parents=True, exist_ok=True)  # only now: bad input never leaves a directory
    resuming = resume_dir is not None
    if not resume_dir:
        dump(cfg, run_dir / "config.yaml")
    logger = MetricsLogger(run_dir, tensorboard_dir=cfg.use_tensorboard or None,
                           use_wandb=cfg.use_wandb, wandb_project=cfg.wandb_project,
                           wandb_run_name=cfg.wandb_run_name or run_dir.name, config=cfg.to_dict(),
                           resume=resuming)
    pool, start = None, 1
    if resume_dir and (run_dir / POOL_FILE).exists():
        done = int(ckpt.name.split("_")[1]) if ckpt else 0
        pool = PromptPool.load(run_dir, until_step=done)
        if resuming:
            logger.truncate_after(done)
        start = done + 1
    trainer = Trainer(cfg, run_dir, seeds, model_path, tok, generator, learner, logger, mode, pool=pool)
    if ckpt is not None:
        learner.load(str(ckpt / "policy"))
        generator.load_weights(learner.named_weights())
        trainer.load_state_dict(load_trainer_state(ckpt))
        log.info("resumed from %s: continuing at step %d", ckpt, start)
    evals: dict[int, dict] = {}
    history = []
    try:
        if eval_set and start == 1:
            evals[0] = evaluate(trainer, eval_set)
            logger.log(0, evals[0])
        for step in range(start, cfg.steps + 1):
            m = trainer.step(step)
            if eval_set and (step == cfg.steps or (cfg.eval_steps and step % cfg.eval_steps == 0)):
                evals[step] = evaluate(trainer, eval_set)
                logger.log(step, evals[step])
                m.update(evals[step])
            history.append(m)
            print_step_summary(step, m, mode)
            if step == cfg.steps or (cfg.save_steps and step % cfg.save_steps == 0):
                save_checkpoint(run_dir, step, learner, trainer.state_dict(), keep=cfg.max_ckpt_num)
        if cfg.save_model:
            learner.save(str(run_dir / "model"))
    finally:
        if hasattr(learner, "close"):  # DeepSpeed: leave the process group cleanly
            learner.close()
        trainer.close()
        logger.close()
        generator.close()
    _summarise(run_dir, history, evals, time.time() - t_start)
    return run_dir


def _summarise(run_dir: Path, history: list[dict], evals: dict[int, dict], secs: float) -> None:
    try:
        from serl.report import write_report

        write_report(run_dir)
    except Exception as e:  # a report problem must not hide a finished run
        log.warning("could not write the report: %s", e)

    def first_last(key):
        vals = [h[key] for h in history if key in h and h[key] == h[key]]
        return (vals[0], vals[-1]) if vals else None

    print(f"\nrun finished in {secs:.0f} s: {run_dir}")
    for key in ("reward/mean", "reward/agreement", "train/batch_prompts", "pool/size"):
        fl = first_last(key)
        if fl:
            print(f"  {key:22s} first step: {fl[0]:.3f}  ->  last step: {fl[1]:.3f}")
    if len(evals) >= 2:
        first, last = evals[min(evals)], evals[max(evals)]
        for key in sorted(first):
            if key in last:
                a, b = first[key], last[key]
                verdict = "improved" if b > a else ("unchanged" if b == a else "got worse")
                print(f"  {key:22s} step {min(evals)}: {a:.3f}  ->  step {max(evals)}: {b:.3f} ({verdict})")
    print(f"  metrics: {run_dir / 'metrics.jsonl'}   report: {run_dir / 'report'}")


def _launch(cfg: TrainConfig, resume_dir: Path | None) -> None:
    if cfg.ray:
        from serl.distributed.run import inside_ray_run, run_with_ray

        if not inside_ray_run():
            run_with_ray(cfg, resume_dir=resume_dir)
            return
    run(cfg, resume_dir=resume_dir)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if "--resume" in argv or any(a.startswith("--resume=") for a in argv):
            i = next(i for i, a in enumerate(argv) if a == "--resume" or a.startswith("--resume="))
            value = argv[i].split("=", 1)[1] if "=" in argv[i] else (argv[i + 1] if i + 1 < len(argv) else "")
            rest = argv[:i] + argv[i + (1 if "=" in argv[i] else 2):]
            run_dir = Path(value)
            if not value or not run_dir.is_dir():
                raise ConfigError(f"--resume: run directory not found: {value!r}")
            cfg = resume_config(run_dir, rest)
            _launch(cfg, run_dir)
        else:
            cfg, _ = parse_args(argv)
            _launch(cfg, None)
    except USER_ERRORS as e:
        print(f"serl train: error: {e}", file=sys.stderr)
        return 2
    return 0
