"""`serl train --ray`: the same ``Trainer`` loop, with its engines in Ray actors.

The driver (this process, or the entrypoint of a ``ray job submit``) holds the loop, the
prompt pool and the metrics; the generator engines, the learner ranks, the reference
model and the math-verify workers are actors placed by ``serl.distributed.placement``.

    python -m serl.distributed.run [serl train flags]     # what `serl train --ray` calls
"""
from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from serl.config import TrainConfig, parse_args
from serl.distributed.groups import GeneratorGroup, LearnerGroup, RewardGroup
from serl.distributed.placement import ResourcePlan, actor_options, place, plan_resources

log = logging.getLogger("serl.distributed")
_ACTIVE = False  # set while run_with_ray is inside serl.train.run


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


@contextmanager
def _engines_from(parts: Parts):
    """Make ``serl.train.run`` build its parts from these actors, for the duration.

    ``serl.train.run`` (checkpoints, resume, evaluation, summary) looks up
    ``make_generator``/``make_learner`` and the trainer its ``EquivalenceChecker`` at
    call time; pointing those names at the Ray groups runs the very same loop. Scoped to
    this call and undone after it. A ``parts=`` argument on ``serl.train.run`` would
    make this explicit (asked of the trainer's owner).
    """
    import serl.trainer as trainer_mod

    global _ACTIVE
    _ACTIVE = True
    saved = (trainer_mod.make_generator, trainer_mod.make_learner, trainer_mod.EquivalenceChecker)
    trainer_mod.make_generator = lambda *a, **k: parts.generator
    trainer_mod.make_learner = lambda *a, **k: parts.learner
    trainer_mod.EquivalenceChecker = lambda *a, **k: parts.reward
    try:
        yield
    finally:
        trainer_mod.make_generator, trainer_mod.make_learner, trainer_mod.EquivalenceChecker = saved
        _ACTIVE = False


def inside_ray_run() -> bool:
    """True while ``run_with_ray`` drives ``serl.train.run`` (so that does not recurse)."""
    return _ACTIVE


def run_with_ray(cfg: TrainConfig, resume_dir: Path | None = None) -> Path:
    """``serl train``'s run (same loop, checkpoints, resume) with the engines as Ray actors."""
    import ray

    from serl import train
    from serl.models import resolve_model

    model_path = resolve_model(cfg.model)  # bad input fails before Ray starts
    started = _init_ray(cfg)
    parts = None
    try:
        parts = launch(cfg, model_path)
        with _engines_from(parts):
            return train.run(cfg, resume_dir=resume_dir) if resume_dir else train.run(cfg)
    finally:
        if parts is not None:
            parts.close()
        if started:
            ray.shutdown()


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
