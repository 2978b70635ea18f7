"""`serl train`: validate inputs, build the parts, run the loop, save, summarise."""
from __future__ import annotations

import logging
import math
import sys
import time
from datetime import datetime
from pathlib import Path

from serl.config import ConfigError, TrainConfig, dump, parse_args
from serl.data.seeds import DataError, read_seeds
from serl.models import ModelError, load_tokenizer, resolve_model

log = logging.getLogger("serl")

# Exceptions that mean "the user's input is wrong": one message, exit code 2.
USER_ERRORS = (ConfigError, DataError, ModelError)


def _new_run_dir(cfg: TrainConfig) -> Path:
    if cfg.run_dir:
        d = Path(cfg.run_dir)
        if d.exists() and any(d.iterdir()):
            raise ConfigError(f"run_dir: {d} already exists and is not empty "
                              f"(use --resume {d} to continue it, or choose another directory)")
        return d
    return Path("runs") / datetime.now().strftime("serl-%Y%m%d-%H%M%S")


def prepare(cfg: TrainConfig):
    """Everything that can fail on bad input, before anything is written."""
    seeds = read_seeds(cfg.prompt_data, cfg.input_key, cfg.label_key or None,
                       limit=cfg.max_samples or None)
    model_path = resolve_model(cfg.model)
    eval_set = read_seeds(cfg.eval_data, cfg.input_key, cfg.label_key or None,
                          limit=cfg.eval_samples or None) if cfg.eval_data else []
    return seeds, model_path, eval_set, _new_run_dir(cfg)


def run(cfg: TrainConfig) -> Path:
    seeds, model_path, eval_set, run_dir = prepare(cfg)  # fail fast, before heavy imports

    from serl.metrics import MetricsLogger
    from serl.progress import print_step_summary, progress_mode
    from serl.trainer import Trainer, evaluate_heldout, make_generator, make_learner
    mode = progress_mode(cfg.progress)
    t_start = time.time()
    tok = load_tokenizer(model_path)
    log.info("model %s, %d seed problems, run directory %s", model_path, len(seeds), run_dir)
    generator = make_generator(cfg, model_path, tok)
    learner = make_learner(cfg, model_path, tok)
    run_dir.mkdir(parents=True, exist_ok=True)  # only now: bad input never leaves a directory
    dump(cfg, run_dir / "config.yaml")
    logger = MetricsLogger(run_dir, tensorboard_dir=cfg.use_tensorboard or None,
                           use_wandb=cfg.use_wandb, wandb_project=cfg.wandb_project,
                           wandb_run_name=cfg.wandb_run_name or run_dir.name, config=cfg.to_dict())
    trainer = Trainer(cfg, run_dir, seeds, model_path, tok, generator, learner, logger, mode)
    before = after = math.nan
    try:
        if eval_set:
            before = evaluate_heldout(trainer, eval_set)
            logger.log(0, {"eval/heldout_acc": before})
            log.info("held-out accuracy before training: %.3f (%d problems)", before, len(eval_set))
        history = []
        for step in range(1, cfg.steps + 1):
            m = trainer.step(step)
            history.append(m)
            print_step_summary(step, m, mode)
        if eval_set:
            after = evaluate_heldout(trainer, eval_set)
            logger.log(cfg.steps, {"eval/heldout_acc": after})
        if cfg.save_model:
            learner.save(str(run_dir / "model"))
    finally:
        trainer.close()
        logger.close()
        generator.close()
    _summarise(run_dir, history, before, after, time.time() - t_start)
    return run_dir


def _summarise(run_dir: Path, history: list[dict], before: float, after: float, secs: float) -> None:
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
            print(f"  {key:22s} step 1: {fl[0]:.3f}  ->  last step: {fl[1]:.3f}")
    if before == before:
        verdict = "improved" if after > before else ("unchanged" if after == before else "got worse")
        print(f"  held-out accuracy      before: {before:.3f}  ->  after: {after:.3f} ({verdict})")
    print(f"  metrics: {run_dir / 'metrics.jsonl'}   report: {run_dir / 'report'}")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    try:
        cfg, ns = parse_args(argv)
        run(cfg)
    except USER_ERRORS as e:
        print(f"serl train: error: {e}", file=sys.stderr)
        return 2
    return 0
