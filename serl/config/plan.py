"""The run's cross-cutting rules, decided once from the config and the recipe.

A recipe states its rules once, as a ``RecipeSpec`` (its config class's ``SPEC``: light to
import, so option checks read it without loading torch). ``plan_run(cfg)`` reads that spec and
the options, and returns a ``RunPlan``: the KL setting (none, in the reward, or in the
loss, with one coefficient), whether a reference model is needed and where it lives,
the learner's objective and its arguments, mini-batch size, epochs, the optimizer
steps the LR schedule spans, and how the loop collects (in step, or the asynchronous
actor-learner of ``serl.run.async_frame``, with or without importance sampling). The engine
factory, the Ray placement, the Ray driver and the runner read the plan; none of them asks
the recipe again, so the engines never import it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from serl import ConfigError

KL_MODES = ("none", "reward", "loss")
REFERENCES = ("none", "learner", "lora", "workers")  # where a reference model lives


def _never(cfg) -> bool:
    return False


def _zero(cfg) -> int:
    return 0


def _one(cfg) -> int:
    return 1


def _nothing(cfg) -> dict:
    return {}


@dataclass(frozen=True)
class RecipeSpec:
    """The per-run rules of a recipe, each a constant or a function of the validated config.
    ``plan_run`` reads them once; nothing asks the recipe again."""

    objective: str = "ppo_clip"  # the learner's objective (serl.algos.objectives)
    objective_args: Callable[[Any], dict] = _nothing  # its own settings (DPO: beta, loss_type, ...)
    kl_modes: tuple[str, ...] = ("none", "loss")  # "reward": the recipe puts the KL in the reward itself
    reference: Callable[[Any], bool] = _never  # a reference model besides the one a KL term needs
    reference_every: Callable[[Any], int] = _zero  # it is refreshed every N steps (a resume reloads it)
    updates_per_step: Callable[[Any], int] = _one  # optimizer steps per training step (the LR schedule)
    learner: Callable[[Any], dict] = _nothing  # other LearnerConfig fields (ppo_epochs, total_steps, ...)
    resume_fixed: tuple[str, ...] = ()  # options a resume refuses to change (beyond the common)
    guard_prompts: Callable[[Any], list] | None = None  # data -> [(text, label)] the guard probes (None: no guard)


@dataclass(frozen=True)
class RunPlan:
    recipe: str
    kl: str = "none"  # none | reward | loss
    kl_coef: float = 0.0  # the one KL coefficient (0 when kl is none)
    reference: str = "none"  # none | learner | lora (the base, adapter off) | workers (Ray)
    ref_workers: int = 0  # Ray reference workers (reference == "workers")
    objective: str = "ppo_clip"
    objective_args: dict = field(default_factory=dict)
    train_batch_size: int = 0  # sequences per optimizer step (0: the whole batch)
    epochs: int = 1  # passes over each step's batch
    updates_per_step: int = 1  # optimizer steps per training step
    total_steps: int = 1  # optimizer steps the LR schedule spans
    learner: dict = field(default_factory=dict)  # other LearnerConfig fields the recipe sets
    async_train: bool = False  # collect step t+1 while step t updates (serl.run.async_frame)
    max_staleness: int = 1  # async: drop samples more than this many policy versions old
    is_cap: float = 0.0  # > 0: truncated importance sampling, weights capped here (serl.algos.tis)
    ref_every: int = 0  # > 0: the recipe refreshes the reference every N steps (a resume reloads it)

    @property
    def needs_reference(self) -> bool:
        return self.reference != "none"

    @property
    def framed(self) -> bool:
        """The loop collects through serl.run.async_frame (it records the generator's samples), not in step."""
        return self.async_train or self.is_cap > 0

    @property
    def learner_needs_reference(self) -> bool:
        """The learner loads one (its own copy, or the LoRA base); Ray workers hold it otherwise."""
        return self.reference in ("learner", "lora")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RunPlan:
        return cls(**d)


def kl_mode(cfg) -> str:
    """The KL setting the options ask for and the recipe allows (its spec's ``kl_modes``).

    A recipe that does not honour the KL options (``SECTIONS`` without ``kl``) has none. A
    KL in the reward that the recipe cannot compute is refused, naming the recipe, unless the
    coefficient is the recipe's own default (then nobody asked for it: no KL)."""
    from serl.config.registry import config_class
    from serl.config.sections import honours

    cls = config_class(cfg.recipe)  # the recipe's declarations (a plain TrainConfig is SeRL's)
    if not honours(cls, "kl") or cfg.init_kl_coef == 0:
        return "none"
    mode = "loss" if cfg.use_kl_loss else "reward"
    allowed = cls.SPEC.kl_modes
    if mode not in allowed:
        default = next(f.default for f in dataclasses.fields(cls) if f.name == "init_kl_coef")
        if mode == "reward" and cfg.init_kl_coef == default:
            return "none"
        raise ConfigError(
            f"init_kl_coef: recipe '{cfg.recipe}' has no KL in the {mode}; "
            + ("add --use_kl_loss or " if "loss" in allowed else "")
            + "set --init_kl_coef 0"
        )
    return mode


def plan_run(cfg) -> RunPlan:
    """The plan of ``cfg``'s run (``cfg`` validated)."""
    from serl.config.registry import config_class

    spec: RecipeSpec = config_class(cfg.recipe).SPEC
    kl = kl_mode(cfg)
    learner = dict(spec.learner(cfg))
    reference = "none"
    own_reference = spec.reference(cfg)
    if kl != "none" or own_reference:
        workers = cfg.ref_num_nodes * cfg.ref_num_gpus_per_node if cfg.ray else 0
        reference = "lora" if cfg.lora_rank else "workers" if workers > 0 else "learner"
    updates = spec.updates_per_step(cfg)
    objective = spec.objective
    if cfg.importance_sampling_correction and objective == "dpo":  # no per-token policy gradient to weight
        raise ConfigError(
            f"importance_sampling_correction: recipe '{cfg.recipe}' trains DPO pairs, which have "
            f"no per-token policy-gradient loss to weight; leave it out"
        )
    if (cfg.async_train or cfg.importance_sampling_correction) and getattr(cfg, "collapse_guard", "off") != "off":
        raise ConfigError(
            "async_train / importance_sampling_correction: not with --collapse_guard (its "
            "rollbacks would leave a batch sampled by a discarded policy)"
        )
    return RunPlan(
        recipe=cfg.recipe,
        kl=kl,
        kl_coef=cfg.init_kl_coef if kl != "none" else 0.0,
        reference=reference,
        ref_workers=cfg.ref_num_nodes * cfg.ref_num_gpus_per_node if reference == "workers" else 0,
        objective=objective,
        objective_args=dict(spec.objective_args(cfg)),
        train_batch_size=cfg.train_batch_size,
        epochs=int(learner.pop("ppo_epochs", 1)),
        updates_per_step=updates,
        total_steps=int(learner.pop("total_steps", cfg.steps * updates)),
        learner=learner,
        async_train=cfg.async_train,
        max_staleness=cfg.max_staleness,
        is_cap=cfg.importance_sampling_cap if cfg.importance_sampling_correction else 0.0,
        ref_every=spec.reference_every(cfg) if own_reference else 0,
    )
