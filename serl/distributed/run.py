"""`serl train --ray`: the same runner and recipe, with the engines in Ray actors.

The driver (this process, or the entrypoint of a ``ray job submit``) holds the runner,
the recipe's state and the metrics; the generator engines, the learner ranks, the
reference model and the math-verify workers are actors placed by
``serl.distributed.placement``, behind the one-process protocols (``groups``); the runner
(``serl.run.runner.run``) starts them as its engines (``ray_engines``).

    python -m serl.distributed.run [serl train flags]     # what `serl train --ray` calls
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from serl.config.options import TrainConfig
from serl.config.parser import parse_args
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
    for k in (
        "SERL_CACHE",
        "HF_HOME",
        "WANDB_MODE",
        "VLLM_CPU_KVCACHE_SPACE",
        "VLLM_CPU_OMP_THREADS_BIND",
        "SERL_ENGINE_LOG",
    ):
        if k in os.environ:
            env[k] = os.environ[k]
    return {"env_vars": env}


def launch(cfg: TrainConfig, model_path: str, run_plan) -> Parts:
    """Reserve the resources, start every actor and build the engines in them, as the run's
    plan (``serl.config.plan.RunPlan``) says."""
    import ray

    from serl.distributed import workers as W

    plan = place(plan_resources(cfg, ray.cluster_resources(), run_plan))
    renv, conf = _env(plan), cfg.to_dict()
    share = 1 + (plan.ref_workers > 0) + (plan.engines > 0)  # actors per colocated bundle
    remote = lambda cls, role, i: ray.remote(cls).options(  # noqa: E731
        runtime_env=renv, **actor_options(plan, role, i, share)
    )

    ranks = [remote(W.LearnerWorker, "learner", i).remote(i, plan.learner_ranks) for i in range(plan.learner_ranks)]
    master = ray.get(ranks[0].address.remote())
    refs = [remote(W.ReferenceWorker, "ref", i).remote() for i in range(plan.ref_workers)]
    engines = [remote(W.GeneratorWorker, "engines", i).remote() for i in range(plan.engines)]
    rewards = [remote(W.RewardWorker, "reward", i).remote() for i in range(plan.reward_workers)]
    # all setups at once: the learner ranks meet in the process-group rendezvous
    from serl.engines.factory import sleep_enabled

    # with reference workers the learner ranks load none of their own (the plan says where it is)
    pending = [r.setup.remote(conf, run_plan.to_dict(), model_path, master) for r in ranks]
    pending += [w.setup.remote(conf, model_path) for w in refs]
    pending += [e.setup.remote(conf, model_path, i) for i, e in enumerate(engines)]
    pending += [w.setup.remote(cfg.verify_timeout) for w in rewards]
    ray.get(pending)
    log.info(
        "Ray layout: %d learner ranks, %d reference, %d engines, %d reward workers (%s, %s)",
        plan.learner_ranks,
        plan.ref_workers,
        plan.engines,
        plan.reward_workers,
        plan.accel,
        "colocated" if plan.colocate else "split",
    )
    sleep = sleep_enabled(cfg) and plan.use_gpu
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


class _RayEngines:
    """The runner's engines over the Ray groups; closing them closes the actors, and Ray when
    this run started it."""

    def __init__(self, parts: Parts, started: bool):
        self.parts, self.started = parts, started
        self.generator, self.learner, self.checker = parts.generator, parts.learner, parts.reward

    def close(self) -> None:
        try:
            self.parts.close()
        finally:
            if self.started:
                import ray

                ray.shutdown()


def ray_engines(cfg: TrainConfig, run_plan, model_path: str) -> _RayEngines:
    """Join or start Ray, then start the actors as the run's plan says: the runner's
    ``start_engines``, called once the run directory is locked."""
    started = _init_ray(cfg)
    try:
        return _RayEngines(launch(cfg, model_path, run_plan), started)
    except BaseException:
        if started:
            import ray

            ray.shutdown()
        raise


def run_with_ray(cfg: TrainConfig, resume_dir: Path | None = None) -> Path:
    """``serl train``'s run (same runner, checkpoints, resume) with the engines as Ray actors."""
    from serl.run.runner import run

    return run(cfg, resume_dir, start_engines=ray_engines)


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``serl train`` flags; ``--ray`` is implied."""
    from serl.run.runner import USER_ERRORS

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S"
    )
    from serl.distributed.oom import is_ray_oom, oom_message

    cfg = None
    try:
        cfg, _ = parse_args(argv)
        cfg.ray = True
        run_with_ray(cfg)
    except USER_ERRORS as e:
        print(f"serl train: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # Ray's out-of-memory kill: one line (serl.distributed.oom)
        if os.environ.get("SERL_DEBUG") or not is_ray_oom(e):
            raise
        print(f"serl train: error: {oom_message(e, cfg)}\n(SERL_DEBUG=1 prints the traceback)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
