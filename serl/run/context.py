"""What the run hands a recipe (``Recipe.__init__(ctx, data)``): the config, the run directory,
the model, the engines, the logger and where a resume starts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serl.config.options import TrainConfig


@dataclass
class RunContext:
    """What the runner hands a recipe."""

    cfg: TrainConfig
    run_dir: Path
    model_path: str
    tokenizer: Any
    generator: Any  # engines.base.Generator
    learner: Any  # engines.base.Learner
    checker: Any  # engines.base.Checker
    logger: Any  # metrics.MetricsLogger
    progress: str = "plain"
    resume_step: int = 0  # the newest checkpoint's step when resuming (0: none yet)
    resuming: bool = False  # the run directory holds an earlier run of this config
    plan: Any = None  # the run's serl.config.plan.RunPlan (None: decided from cfg)
