"""The SeRL recipe's own options (self-instruction, difficulty filter, refill)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from serl import ConfigError
from serl.config.options import TrainConfig
from serl.config.options import option as _f
from serl.config.plan import RecipeSpec
from serl.report.panels import Report
from serl.rewards.remote_options import RemoteRewardOptions
from serl.run.guard_options import GUARD_OPTIONS, GuardOptions


@dataclass
class SerlOptions:
    max_refill_rounds: int = _f(3, "rounds per step (generate, roll out, filter) to fill the batch after filtering")
    gen_batch_size: int = _f(
        0,
        "prompts a round writes and rolls out (0 = rollout_batch_size); a larger round "
        "fills the batch in fewer, fuller engine calls, and kept groups beyond the batch "
        "train first in the next step (verl DAPO's data.gen_batch_size)",
    )
    enable_self_evolution: bool = _f(True, "grow the prompt pool by few-shot self-instruction")
    instructions_num_per_iteration: int = _f(
        0,
        "SeRL's learning-rate schedule length, in prompts: the "
        "schedule spans ceil(N / rollout_batch_size) steps (0 = "
        "--steps); what a step generates is set by rollout_batch_size",
    )
    few_shot_generation: int = _f(8, "examples per few-shot instruction prompt")
    few_shot_generation_prompt: str = _f(
        "",
        "few-shot instruction template: a file (or a name in prompts/) with "
        "{examples} and {next} ('' = serl's own, prompts/self_instruct_fewshot.txt)",
    )
    few_shot_generation_batch_size: int = _f(8, "few-shot prompts per generate call")
    reward_difficulty_bounds: list = _f([0.2, 0.8], "keep prompts whose agreement lies in [low, high]")
    instruction_max_len: int = _f(256, "max new tokens of one few-shot generation (several problems)")
    instruction_max_attempts: int = _f(4, "generate calls per round before self-instruction gives up short")
    instruction_one_call: bool = _f(
        False,
        "size each self-instruction call to the problems still needed (from "
        "the run's accepted problems per prompt), so a round usually takes "
        "one engine call; at most batch_size x max_attempts prompts a round",
    )
    instruction_temperature: float = _f(0.8, "sampling temperature for problem generation")
    instruction_top_p: float = _f(0.95, "nucleus sampling for problem generation")
    rouge_threshold: float = _f(0.7, "reject a new problem whose ROUGE-L F1 with a known one exceeds this")
    overlong_filter: bool = _f(
        False, "leave responses cut off by --generate_max_len out of the loss (DAPO); their votes still count"
    )
    # issue 62: the label-free options (docs/algorithms.md, "Label-free options")
    overlong_buffer_len: int = _f(
        0,
        "DAPO's soft overlong penalty: answers longer than generate_max_len minus "
        "this lose up to overlong_penalty_factor of reward, linearly (0 = off; "
        "OpenRLHF's --reward.overlong_buffer_len)",
    )
    overlong_penalty_factor: float = _f(
        1.0, "the soft overlong penalty at generate_max_len (OpenRLHF's --reward.overlong_penalty_factor)"
    )
    stop_properly_penalty_coef: float = _f(
        1.0,
        "a cut answer's reward is multiplied by this (in [0, 1]; 1 = "
        "unchanged), or set to it when negative (ProRL; OpenRLHF's "
        "--reward.stop_properly_penalty_coef)",
    )
    min_majority_share: float = _f(
        0.0,
        "leave out of the loss a voted group whose majority share is below "
        "this: no clear majority, no signal (CuMa; 0 = off)",
    )
    no_majority_penalty: float = _f(
        0.0,
        "instead of masking a group below min_majority_share, zero its rewards "
        "and subtract this from every advantage of it (RESTRAIN's negative "
        "rollout penalization; 0 = mask)",
    )
    agreement_weight_power: float = _f(
        0.0,
        "multiply a voted group's advantages by its majority share to "
        "this power (RESTRAIN-style prompt weight; 0 = off)",
    )
    curriculum: str = _f(
        "none",
        "agreement: before step 1, roll out every seed once and train the seeds in "
        "order of vote share, highest first, every pass (CuMa's easy-first; "
        "needs --enable_self_evolution false)",
        choices=("none", "agreement"),
    )


def updates_per_step(cfg) -> int:
    """The rollout's sequences over ``train_batch_size``, one optimizer step each."""
    seqs, size = cfg.rollout_batch_size * cfg.n_samples_per_prompt, cfg.train_batch_size
    return 1 if not size or size >= seqs else math.ceil(seqs / size)


def learner_settings(cfg) -> dict:
    """SeRL sizes the LR schedule by ``instructions_num_per_iteration`` prompts, i.e.
    N * n_samples_per_prompt / train_batch_size optimizer steps (0: by ``--steps``)."""
    n = cfg.instructions_num_per_iteration
    return {"total_steps": math.ceil(n / cfg.rollout_batch_size) * updates_per_step(cfg)} if n else {}


@dataclass
class Config(SerlOptions, RemoteRewardOptions, GuardOptions, TrainConfig):
    """SeRL: self-instruction, majority-vote reward, difficulty filter, Reinforce++/GRPO/RLOO."""

    RECIPE: ClassVar[str] = "serl"
    SPEC: ClassVar[RecipeSpec] = RecipeSpec(
        kl_modes=("none", "reward", "loss"),  # the reward KL: make_batch
        updates_per_step=updates_per_step,
        learner=learner_settings,
        guard_prompts=lambda seeds: [(s.text, s.label) for s in seeds],
        resume_fixed=(
            "enable_self_evolution",
            "reward_difficulty_bounds",
            "instructions_num_per_iteration",
            "overlong_filter",
        )
        + GUARD_OPTIONS,
    )
    REPORT: ClassVar[Report] = Report(
        plots=("reward", "filters", "pool", "guard"),
        main=(
            "reward/mean",
            "reward/agreement",
            "reward/no_answer_frac",
            "filter/difficulty/kept",
            "pool/size",
            "pool/kept",
            "kl/mean",
        ),
        line=(
            ("reward/mean", "reward"),
            ("reward/agreement", "agree"),
            ("response/truncated_frac", "trunc"),
            ("pool/kept", "kept"),
            ("loss/policy", "loss"),
            ("kl/mean", "kl"),
        ),
    )

    def instruct_config(self, prompt_max_len: int):
        """Self-instruction's settings; a few-shot prompt and its reply must fit the engine's
        context (prompt_max_len + generate_max_len); its examples are seeds that fit already."""
        from serl.recipes.serl.instruct import InstructConfig

        return InstructConfig(
            n_shots=self.few_shot_generation,
            prompts_per_call=self.few_shot_generation_batch_size,
            max_new_tokens=self.instruction_max_len,
            max_attempts=self.instruction_max_attempts,
            one_call=self.instruction_one_call,
            temperature=self.instruction_temperature,
            top_p=self.instruction_top_p,
            rouge_threshold=self.rouge_threshold,
            **({"template": self.few_shot_generation_prompt} if self.few_shot_generation_prompt else {}),  # type: ignore[arg-type]
            max_prompt_tokens=max(1, prompt_max_len + self.generate_max_len - self.instruction_max_len),
        )

    def validate_recipe(self) -> None:
        self.validate_guard()
        self.validate_remote_reward()
        lo_hi = self.reward_difficulty_bounds
        if len(lo_hi) != 2 or not 0.0 <= float(lo_hi[0]) <= float(lo_hi[1]) <= 1.0:
            raise ConfigError(f"reward_difficulty_bounds: need two numbers 0 <= low <= high <= 1, got {lo_hi}")
        if self.few_shot_generation_prompt:
            from serl.recipes.serl.instruct.template import TemplateError, load_template

            try:
                load_template(self.few_shot_generation_prompt)
            except TemplateError as e:
                raise ConfigError(f"few_shot_generation_prompt: {e}") from None
        if self.gen_batch_size < 0:
            raise ConfigError(f"gen_batch_size: must be >= 0 (0 = rollout_batch_size), got {self.gen_batch_size}")
        if self.max_refill_rounds < 1:
            raise ConfigError(f"max_refill_rounds: must be >= 1, got {self.max_refill_rounds}")
        if self.instructions_num_per_iteration < 0:
            raise ConfigError(
                f"instructions_num_per_iteration: must be >= 0 (0 = the schedule spans "
                f"--steps), got {self.instructions_num_per_iteration}"
            )
        if self.prompt_max_len < 1:
            raise ConfigError(f"prompt_max_len: must be >= 1, got {self.prompt_max_len}")
        self.validate_label_free()
        if self.reward_mode == "rule" and self.enable_self_evolution:
            raise ConfigError(
                "reward_mode: rule needs a label for every problem it trains on, but with "
                "--enable_self_evolution the problems are generated and have none; use "
                "--reward_mode majority or auto (auto: the rule reward where a problem has a "
                "label, the vote elsewhere), or --enable_self_evolution false to train the "
                "labelled seeds"
            )

    def validate_label_free(self) -> None:
        """The issue-62 options: ranges, and the combinations that would be silent."""
        if not 0 <= self.overlong_buffer_len <= self.generate_max_len:
            raise ConfigError(
                f"overlong_buffer_len: must lie in [0, generate_max_len = {self.generate_max_len}], "
                f"got {self.overlong_buffer_len}"
            )
        if self.overlong_penalty_factor < 0:
            raise ConfigError(f"overlong_penalty_factor: must be >= 0, got {self.overlong_penalty_factor}")
        if self.stop_properly_penalty_coef > 1:
            raise ConfigError(
                f"stop_properly_penalty_coef: must be in [0, 1] (a scale) or negative (the reward "
                f"of a cut answer), got {self.stop_properly_penalty_coef}"
            )
        scored = [
            f"--{n}"
            for n, on in (
                ("overlong_buffer_len", self.overlong_buffer_len > 0),
                ("stop_properly_penalty_coef", self.stop_properly_penalty_coef != 1),
            )
            if on
        ]
        if self.overlong_filter and scored:
            raise ConfigError(
                f"{' and '.join(scored)} score cut answers, --overlong_filter leaves them out of "
                f"the loss: choose one (a masked answer's penalised reward would still move its "
                f"group's baseline)"
            )
        for name in ("min_majority_share", "agreement_weight_power"):
            v = getattr(self, name)
            if not (0.0 <= v <= 1.0 if name == "min_majority_share" else v >= 0.0):
                raise ConfigError(f"{name}: must be {'in [0, 1]' if name == 'min_majority_share' else '>= 0'}, got {v}")
            if v and self.reward_mode == "rule" and not self.remote_rm_url:
                raise ConfigError(
                    f"{name}: acts on groups scored by the vote, and --reward_mode rule votes on "
                    f"none; use --reward_mode majority or auto"
                )
        if self.no_majority_penalty < 0:
            raise ConfigError(f"no_majority_penalty: must be >= 0 (it is subtracted), got {self.no_majority_penalty}")
        if self.no_majority_penalty and not self.min_majority_share:
            raise ConfigError(
                "no_majority_penalty: acts on the groups below --min_majority_share, which is 0 (off); set both"
            )
        if self.curriculum != "none" and self.enable_self_evolution:
            raise ConfigError(
                "curriculum: orders the seed problems by a probe rollout's vote share, but with "
                "--enable_self_evolution the trained problems are generated ones, unknown before "
                "they are rolled out; add --enable_self_evolution false"
            )


SerlConfig = Config
