"""Where each Ray actor goes: placement groups for colocated or split layouts.

The SeRL/OpenRLHF flags describe GPUs (``--actor_num_gpus_per_node`` ...). On a cluster
without GPUs the same layout is built from CPU slots, so the code path is the one a GPU
cluster takes, only the resource name differs.

- Colocated (``--colocate_all_models``): one placement group with one bundle per learner
  rank; learner rank i, reference worker i and engine i share bundle i, each asking for a
  share of it (GPU memory is then shared; vLLM's sleep mode frees it between rollouts).
- Split: the learner ranks, the reference workers and the engines get placement groups of
  their own; reward workers need no accelerator and go wherever there is a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from serl import ConfigError


@dataclass
class ResourcePlan:
    """How many workers of each kind, and what each one asks Ray for."""

    use_gpu: bool
    learner_ranks: int
    ref_workers: int  # 0 when the recipe needs no reference model (or LoRA serves it)
    reward_workers: int
    engines: int
    tp: int  # accelerators per engine
    colocate: bool
    slot: float  # CPUs in one bundle (1 with GPUs; a share of the cluster without)
    groups: dict = field(default_factory=dict)  # name -> placement group, filled by place()

    @property
    def accel(self) -> str:
        return "GPU" if self.use_gpu else "CPU"

    def bundles(self) -> dict[str, list[dict]]:
        """Placement-group bundles by group name."""

        def one(n_accel: float) -> dict:
            return {"GPU": n_accel, "CPU": 1} if self.use_gpu else {"CPU": self.slot * n_accel}

        if self.colocate:
            return {"colocated": [one(1) for _ in range(self.learner_ranks)]}
        out = {
            "learner": [one(1) for _ in range(self.learner_ranks)],
            "engines": [one(self.tp) for _ in range(self.engines)],
        }
        if self.ref_workers:
            out["ref"] = [one(1) for _ in range(self.ref_workers)]
        return out


def plan_resources(cfg, cluster: dict, run_plan) -> ResourcePlan:
    """A plan from the run's flags and ``ray.cluster_resources()``; ConfigError if it cannot fit.
    Reference workers: as many as the run's plan (``serl.config.plan.RunPlan``, decided once by the
    caller) puts there (none under LoRA, where the learner's base with the adapter off is the reference)."""
    use_gpu = cluster.get("GPU", 0) > 0
    ranks = cfg.actor_num_nodes * cfg.actor_num_gpus_per_node
    refs = run_plan.ref_workers
    rewards = cfg.reward_num_nodes * cfg.reward_num_gpus_per_node
    for name, v in (
        ("actor_num_nodes * actor_num_gpus_per_node", ranks),
        ("vllm_num_engines", cfg.vllm_num_engines),
        ("vllm_tensor_parallel_size", cfg.vllm_tensor_parallel_size),
    ):
        if v < 1:
            raise ConfigError(f"{name}: must be >= 1, got {v}")
    if cfg.learner == "torch" and ranks > 1:
        raise ConfigError(
            f"actor_num_gpus_per_node: the torch learner runs one rank; {ranks} ranks need --learner deepspeed"
        )
    if cfg.colocate_all_models:
        if cfg.vllm_tensor_parallel_size != 1:
            raise ConfigError(
                "vllm_tensor_parallel_size: colocated engines share one bundle each; "
                "use 1, or drop --colocate_all_models"
            )
        if cfg.vllm_num_engines > ranks or refs > ranks:
            raise ConfigError(
                f"colocate_all_models: {cfg.vllm_num_engines} engines and {refs} "
                f"reference workers must each fit on one of the {ranks} learner bundles"
            )
    plan = ResourcePlan(
        use_gpu,
        ranks,
        refs,
        max(1, rewards),
        cfg.vllm_num_engines,
        cfg.vllm_tensor_parallel_size,
        cfg.colocate_all_models,
        1.0,
    )
    need = sum(b.get(plan.accel, 0) for bs in plan.bundles().values() for b in bs)
    have = cluster.get(plan.accel, 0)
    if use_gpu and need > have:
        raise ConfigError(
            f"the layout needs {need:g} GPUs, the Ray cluster has {have:g} "
            "(lower actor/ref GPUs or vllm_num_engines, or colocate)"
        )
    if not use_gpu:  # CPU slots: share what there is (fractional bundles are fine in Ray)
        plan.slot = min(1.0, (have * 0.9) / max(need, 1.0))
        if plan.slot <= 0:
            raise ConfigError("the Ray cluster has no CPUs")
    return plan


def place(plan: ResourcePlan, timeout: float = 120.0) -> ResourcePlan:
    """Create the placement groups and wait until Ray has reserved them."""
    import ray
    from ray.util.placement_group import placement_group

    for name, bundles in plan.bundles().items():
        pg = placement_group(bundles, strategy="PACK", name=f"serl-{name}")
        try:
            ray.get(pg.ready(), timeout=timeout)
        except Exception as e:
            raise ConfigError(
                f"Ray could not reserve {name} resources {bundles} within "
                f"{timeout:.0f} s (cluster: {ray.cluster_resources()})"
            ) from e
        plan.groups[name] = pg
    return plan


def actor_options(plan: ResourcePlan, role: str, index: int, sharing: int = 1) -> dict:
    """``.options(...)`` for worker ``index`` of ``role`` (learner | ref | engines | reward).

    ``sharing``: how many actors share one colocated bundle (each asks for 1/sharing).
    """
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    if role == "reward":  # math-verify needs no accelerator; a small CPU share anywhere
        return {"num_cpus": 0.01 if not plan.use_gpu else 1}
    if plan.colocate:
        group, bundle, share = "colocated", index % plan.learner_ranks, 1.0 / sharing
        amount = share
    else:
        group, bundle = role, index
        amount = float(plan.tp) if role == "engines" else 1.0
    opts: dict = {
        "scheduling_strategy": PlacementGroupSchedulingStrategy(plan.groups[group], placement_group_bundle_index=bundle)
    }
    if plan.use_gpu:
        opts.update(num_gpus=amount, num_cpus=min(1.0, amount) if plan.colocate else 1)
    else:
        opts.update(num_cpus=plan.slot * amount, num_gpus=0)
    return opts
