"""`serl train --ray`: the same ``Trainer`` loop, with its engines in Ray actors.

The driver (this process, or the entrypoint of a ``ray job submit``) holds the loop, the
prompt pool and the metrics; the generator engines, the learner ranks, the reference
model and the math-verify workers are actors placed by ``serl.distributed.placement``.

    python -m serl.distributed.run [serl train flags]     # what `serl train --ray` calls
"""
from __future__ import annotations

import logging
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from serl.config import TrainConfig, dump, parse_args
from serl.distributed.groups import GeneratorGroup, LearnerGroup, RewardGroup
from serl.distributed.placement import ResourcePlan, actor_options, place, plan_resources

log = logging.getLogger("serl.distributed")


@dataclass
class Parts:
    plan: ResourcePlan
    generator: GeneratorGroup
    learner: LearnerGroup
    reward: RewardGroup

    def close(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for part in (self.generator, self.learner, self.reward):
            try:
                part.close()
            except Exception as e:  # one failed close must not keep the others open
                log.warning("closing %s: %s", type(part).__name__, e)
        for pg in self.plan.groups.values():
            remove_placement_group(pg)


def _env(plan: ResourcePlan) -> dict:
    env = {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    if not plan.use_gpu:
        env["DS_ACCELERATOR"] = "cpu"
    for k in ("SERL_CACHE", "HF_HOME", "WANDB_MODE", "VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND"):
        if k in os.environ:
            env[k] = os.environ[k]
    return {"env_vars": env}


def launch(cfg: TrainConfig, model_path: str) -> Parts:
    """Reserve the resources, start every actor and build the engines in them."""
    import ray

    from serl.distributed import workers as W

    plan = place(plan_resources(cfg, ray.cluster_resources()))
    renv, conf = _env(plan), cfg.to_dict()
    share = 1 + (plan.ref_workers > 0) + (plan.engines > 0)  # actors per colocated bundle
    remote = lambda cls, role, i: ray.remote(cls).options(  # noqa: E731
        runtime_env=renv, **actor_options(plan, role, i, share))

    ranks = [remote(W.LearnerWorker, "learner", i).remote(i, plan.learner_ranks)
             for i in range(plan.learner_ranks)]
    master = ray.get(ranks[0].address.remote())
    refs = [remote(W.ReferenceWorker, "ref", i).remote() for i in range(plan.ref_workers)]
    engines = [remote(W.GeneratorWorker, "engines", i).remote() for i in range(plan.engines)]
    rewards = [remote(W.RewardWorker, "reward", i).remote() for i in range(plan.reward_workers)]
    # all setups at once: the learner ranks meet in the process-group rendezvous
    pending = [r.setup.remote(conf, model_path, master, need_ref=False) if refs else
               r.setup.remote(conf, model_path, master, need_ref=cfg.init_kl_coef > 0) for r in ranks]
    pending += [w.setup.remote(conf, model_path) for w in refs]
    pending += [e.setup.remote(conf, model_path, i) for i, e in enumerate(engines)]
    pending += [w.setup.remote(cfg.verify_timeout) for w in rewards]
    ray.get(pending)
    log.info("Ray layout: %d learner ranks, %d reference, %d engines, %d reward workers (%s, %s)",
             plan.learner_ranks, plan.ref_workers, plan.engines, plan.reward_workers,
             plan.accel, "colocated" if plan.colocate else "split")
    sleep = cfg.vllm_enable_sleep and plan.use_gpu
    return Parts(plan, GeneratorGroup(engines, sleep=sleep), LearnerGroup(ranks, refs), RewardGroup(rewards))


def _init_ray(cfg: TrainConfig) -> bool:
    """Join the given cluster, the job's cluster (RAY_ADDRESS), or start a local one.

    Returns True when this call started Ray (and so must shut it down).
    """
    import ray

    if ray.is_initialized():
        return False
    address = cfg.ray_address or os.environ.get("RAY_ADDRESS") or None
    ray.init(address=address, log_to_driver=True, include_dashboard=False if not address else None)
    return True


def run_with_ray(cfg: TrainConfig) -> Path:
    """Run the loop of ``serl train`` with Ray actors behind the Generator/Learner protocols."""
    from serl.train import _summarise, prepare

    seeds, model_path, eval_set, run_dir = prepare(cfg)  # bad input fails before Ray starts
    import ray

    from serl.metrics import MetricsLogger
    from serl.models import load_tokenizer
    from serl.progress import print_step_summary, progress_mode
    from serl.trainer import Trainer, evaluate_heldout

    mode = progress_mode(cfg.progress)
    t_start = time.time()
    started = _init_ray(cfg)
    parts = None
    try:
        tok = load_tokenizer(model_path)
        parts = launch(cfg, model_path)
        run_dir.mkdir(parents=True, exist_ok=True)
        dump(cfg, run_dir / "config.yaml")
        logger = MetricsLogger(run_dir, tensorboard_dir=cfg.use_tensorboard or None,
                               use_wandb=cfg.use_wandb, wandb_project=cfg.wandb_project,
                               wandb_run_name=cfg.wandb_run_name or run_dir.name, config=cfg.to_dict())
        trainer = Trainer(cfg, run_dir, seeds, model_path, tok, parts.generator, parts.learner, logger, mode)
        trainer.checker.close()  # never started (it starts lazily): the reward workers do the checks
        trainer.checker = parts.reward
        before = after = math.nan
        history: list[dict] = []
        try:
            if eval_set:
                before = evaluate_heldout(trainer, eval_set)
                logger.log(0, {"eval/heldout_acc": before})
            for step in range(1, cfg.steps + 1):
                m = trainer.step(step)
                history.append(m)
                print_step_summary(step, m, mode)
            if eval_set:
                after = evaluate_heldout(trainer, eval_set)
                logger.log(cfg.steps, {"eval/heldout_acc": after})
            if cfg.save_model:
                parts.learner.export_hf(str((run_dir / "model").resolve()))
            if cfg.ckpt_path:
                parts.learner.save(str(Path(cfg.ckpt_path).resolve()))
        finally:
            trainer.pool.flush()
            logger.close()
    finally:
        if parts is not None:
            parts.close()
        if started:
            ray.shutdown()
    _summarise(run_dir, history, before, after, time.time() - t_start)
    return run_dir


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``serl train`` flags; ``--ray`` is implied."""
    from serl.train import USER_ERRORS

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    try:
        cfg, _ = parse_args(argv)
        cfg.ray = True
        run_with_ray(cfg)
    except USER_ERRORS as e:
        print(f"serl train: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
