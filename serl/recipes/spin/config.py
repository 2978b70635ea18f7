"""The SPIN recipe's own options, and the iteration plan they imply.

Two modes share one DPO learner objective:

- ``spin`` (Chen et al. 2024): each iteration the current model answers the iteration's
  prompts; every pair is (human answer, own answer) and the reference is the model as it
  was when it wrote them. The previous iteration's pairs can be mixed in.
- ``online`` (verl's online-DPO recipe, inspired by SPIN): each step samples
  ``n_samples_per_prompt`` answers per prompt, rewards them (rule reward with labels, or
  the label-free majority vote) and trains the best against the worst.

One training step is one optimizer step. In ``spin`` mode an iteration is
``epochs_per_iteration × ceil(pairs / rollout_batch_size)`` steps (``iteration_steps``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from serl import ConfigError
from serl.algos.losses import DPO_LOSS_TYPES
from serl.config.options import TrainConfig, option
from serl.config.plan import RecipeSpec
from serl.recipes.spin.plots import plot_dpo
from serl.report.panels import Report
from serl.rewards.remote_options import RemoteRewardOptions

SPIN_MODES = ("spin", "online")


@dataclass
class SpinOptions:
    spin_mode: str = option(
        "spin",
        "spin: human answer vs own answer, reference = the model of the iteration "
        "(SPIN); online: best vs worst of own answers by reward (online DPO)",
        choices=SPIN_MODES,
    )
    beta: float = option(0.1, "DPO beta: weight of the log-ratio to the reference (SPIN and verl: 0.1)")
    dpo_loss: str = option(
        "sigmoid", "DPO loss: sigmoid (DPO/SPIN), hinge (SPIN's alternative) or ipo", choices=DPO_LOSS_TYPES
    )
    label_smoothing: float = option(0.0, "conservative-DPO label smoothing in [0, 0.5) (sigmoid loss only)")
    ref_update: str = option(
        "auto",
        "when the reference becomes the current policy: iteration (spin mode: at "
        "each iteration start), steps:N (every N optimizer steps; spin mode also "
        "at iteration starts); auto = iteration in spin mode, steps:1 online",
    )
    iteration_size: int = option(0, "spin mode: prompts answered per iteration (0 = all of --prompt_data)")
    epochs_per_iteration: int = option(
        2, "spin mode: passes over an iteration's pairs, --rollout_batch_size pairs per optimizer step"
    )
    mix_previous: float = option(
        1.0,
        "spin mode: share of the previous iteration's generated pairs trained "
        "again with the new ones (SPIN: 1.0, all of them)",
    )


@dataclass
class Config(SpinOptions, RemoteRewardOptions, TrainConfig):
    """SPIN: self-play fine-tuning on human answers, and online DPO on rewarded own answers."""

    RECIPE: ClassVar[str] = "spin"
    # DPO; online steps:N (N > 1) keeps a reference that lags the policy by up to N - 1 steps (the
    # other modes score the pairs with the policy itself, before the update)
    SPEC: ClassVar[RecipeSpec] = RecipeSpec(
        objective="dpo",
        objective_args=lambda cfg: {
            "beta": cfg.beta,
            "loss_type": cfg.dpo_loss,
            "label_smoothing": cfg.label_smoothing,
        },
        reference=lambda cfg: cfg.spin_mode == "online" and cfg.ref_every() > 1,
        reference_every=lambda cfg: cfg.ref_every(),
        resume_fixed=(
            "spin_mode",
            "beta",
            "dpo_loss",
            "label_smoothing",
            "ref_update",
            "iteration_size",
            "epochs_per_iteration",
            "mix_previous",
            "answer_fallback",
            "temperature",
            "top_p",
            "generate_max_len",
            "system_prompt",
        ),
    )
    # no advantages and no KL term: DPO's beta is the pull to the reference
    SECTIONS: ClassVar[tuple[str, ...]] = (
        "run",
        "seed_data",
        "math_eval",
        "rollout",
        "math_reward",
        "checker",
        "generation",
        "learner",
        "lora",
        "ray",
        "async",
    )
    REPORT: ClassVar[Report] = Report(
        plots=("reward",),
        figures=(("dpo", plot_dpo),),
        main=("dpo/accuracy", "dpo/margin", "spin/real_logp", "pairs/tied", "reward/mean"),
        line=(("dpo/accuracy", "acc"), ("dpo/margin", "margin"), ("loss/policy", "loss")),
    )
    # common options with SPIN's defaults (each keeps its type and place: TrainConfig.DEFAULTS)
    DEFAULTS: ClassVar[dict] = dict(
        prompt_data=option(
            "dataset/arith_spin_train.jsonl",
            "problems with human answers: a JSONL or Parquet "
            "file, or a Hugging Face dataset (save_to_disk folder, data files, or hub id)",
        ),
        output_key=option("solution", "JSON key of the human answer (worked solution); spin mode needs it"),
        n_samples_per_prompt=option(
            0,
            "own answers per prompt: spin mode pairs each with the human answer, "
            "online mode pairs best with worst; 0 = 1 in spin mode, 2 online",
        ),
        steps=option(
            3,
            "optimizer steps; in spin mode an iteration takes epochs_per_iteration x "
            "ceil(pairs / rollout_batch_size) of them",
        ),
        rollout_batch_size=option(8, "spin: pairs per optimizer step; online: prompts sampled per step"),
        init_kl_coef=option(0.0, "unused by this recipe (beta sets the pull to the reference)"),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_samples_per_prompt == 0:
            self.n_samples_per_prompt = 1 if self.spin_mode == "spin" else 2
        if self.ref_update == "auto":
            self.ref_update = "iteration" if self.spin_mode == "spin" else "steps:1"

    def ref_every(self) -> int:
        """N of ``--ref_update steps:N``; 0 for ``iteration``."""
        return parse_ref_update(self.ref_update)

    def validate_recipe(self) -> None:
        every = self.ref_every()
        self.validate_remote_reward()
        if self.remote_rm_url and self.spin_mode == "spin":
            raise ConfigError(
                "remote_rm_url: spin mode pairs human answers with the model's and takes no "
                "reward; use --spin_mode online"
            )
        if not self.beta > 0:
            raise ConfigError(f"beta: must be > 0, got {self.beta}")
        if not 0.0 <= self.label_smoothing < 0.5:
            raise ConfigError(f"label_smoothing: must be in [0, 0.5), got {self.label_smoothing}")
        if self.label_smoothing and self.dpo_loss != "sigmoid":
            raise ConfigError(f"label_smoothing: applies to --dpo_loss sigmoid only, not {self.dpo_loss}")
        if self.spin_mode == "spin":
            if not self.output_key:
                raise ConfigError(
                    "output_key: spin mode trains on human answers; name their key with --output_key (e.g. solution)"
                )
            if self.iteration_size < 0 or self.epochs_per_iteration < 1:
                raise ConfigError(
                    "iteration_size / epochs_per_iteration: need >= 0 / >= 1, got "
                    f"{self.iteration_size} / {self.epochs_per_iteration}"
                )
            if not 0.0 <= self.mix_previous <= 1.0:
                raise ConfigError(f"mix_previous: must be in [0, 1], got {self.mix_previous}")
        else:
            if every == 0:
                raise ConfigError("ref_update: online mode has no iterations; use steps:N")
            if self.n_samples_per_prompt < 2:
                raise ConfigError(
                    f"n_samples_per_prompt: online mode pairs the best with the worst answer "
                    f"and needs >= 2, got {self.n_samples_per_prompt}"
                )
            if every > 1 and self.save_steps % every:
                # the lagging reference is restored from the checkpoint at its window start
                raise ConfigError(
                    f"save_steps: with --ref_update steps:{every} online, checkpoints must fall "
                    f"on reference refreshes: use a multiple of {every} (or 0), got {self.save_steps}"
                )
            if every > 1 and self.ray and self.ref_num_gpus_per_node > 0:
                raise ConfigError(
                    "ref_num_gpus_per_node: the refreshed reference lives in the learner; set it to 0 with --ray"
                )


def parse_ref_update(value: str) -> int:
    """``iteration`` -> 0, ``steps:N`` -> N (N >= 1); anything else is a ConfigError."""
    if value == "iteration":
        return 0
    head, _, n = value.partition(":")
    if head == "steps" and n.strip().isdigit() and int(n) >= 1:
        return int(n)
    raise ConfigError(f"ref_update: expected 'iteration' or 'steps:N' with N >= 1, got {value!r}")


def mixed_count(mix: float, n: int) -> int:
    """How many of the previous iteration's ``n`` pairs are trained again (round half up)."""
    return math.floor(mix * n + 0.5)


def iteration_steps(cfg, n_problems: int, iteration: int) -> int:
    """Optimizer steps of SPIN iteration ``iteration`` (0-based) on ``n_problems`` prompts.

    Every generated answer makes a pair (an empty one counts as the bare end-of-turn
    token), so the count follows from the options alone."""
    new = (cfg.iteration_size or n_problems) * cfg.n_samples_per_prompt
    pairs = new + (mixed_count(cfg.mix_previous, new) if iteration > 0 else 0)
    return cfg.epochs_per_iteration * math.ceil(pairs / cfg.rollout_batch_size)


SpinConfig = Config
