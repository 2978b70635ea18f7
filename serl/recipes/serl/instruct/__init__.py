"""Self-instruction: few-shot problem generation, text filters, the difficulty filter
and the prompt pool with its provenance (see docs and prompts/)."""

from serl.recipes.serl.instruct.config import InstructConfig
from serl.recipes.serl.instruct.filters import DifficultyFilter, TextFilters, normalize
from serl.recipes.serl.instruct.generate import Candidate, SelfInstruct
from serl.recipes.serl.instruct.pool import PoolError, PoolItem, PromptPool
from serl.recipes.serl.instruct.rollouts import Rollout, fill_batch
from serl.recipes.serl.instruct.template import build_prompt, load_template, parse_items

__all__ = [
    "InstructConfig",
    "DifficultyFilter",
    "TextFilters",
    "normalize",
    "Candidate",
    "SelfInstruct",
    "PoolError",
    "PoolItem",
    "PromptPool",
    "Rollout",
    "fill_batch",
    "build_prompt",
    "load_template",
    "parse_items",
]
