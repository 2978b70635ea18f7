"""The SeRL recipe's own options (self-instruction, difficulty filter, refill)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from serl.config import ConfigError, TrainConfig, _f


@dataclass
class SerlOptions:
    max_refill_rounds: int = _f(3, "rollout rounds per step to fill the batch after filtering")
    enable_self_evolution: bool = _f(True, "grow the prompt pool by few-shot self-instruction")
    instructions_num_per_iteration: int = _f(8, "new problems to generate per round")
    few_shot_generation: int = _f(8, "examples per few-shot instruction prompt")
    few_shot_generation_batch_size: int = _f(8, "few-shot prompts per generate call")
    reward_difficulty_bounds: list = _f([0.2, 0.8], "keep prompts whose agreement lies in [low, high]")
    instruction_max_len: int = _f(256, "max new tokens of one few-shot generation (several problems)")
    instruction_max_attempts: int = _f(4, "generate calls per round before self-instruction gives up short")
    instruction_temperature: float = _f(0.8, "sampling temperature for problem generation")
    instruction_top_p: float = _f(0.95, "nucleus sampling for problem generation")
    replay_window: int = _f(1, "steps a kept generated problem stays trainable (1 = SeRL: its own step)")
    rouge_threshold: float = _f(0.7, "reject a new problem whose ROUGE-L F1 with a known one exceeds this")


@dataclass
class Config(SerlOptions, TrainConfig):
    """SeRL: self-instruction, majority-vote reward, difficulty filter, Reinforce++/GRPO/RLOO."""

    RECIPE: ClassVar[str] = "serl"

    def validate_recipe(self) -> None:
        lo_hi = self.reward_difficulty_bounds
        if len(lo_hi) != 2 or not 0.0 <= float(lo_hi[0]) <= float(lo_hi[1]) <= 1.0:
            raise ConfigError(f"reward_difficulty_bounds: need two numbers 0 <= low <= high <= 1, got {lo_hi}")
        if self.max_refill_rounds < 1:
            raise ConfigError(f"max_refill_rounds: must be >= 1, got {self.max_refill_rounds}")


SerlConfig = Config
