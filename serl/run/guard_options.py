"""The collapse guard's options and their checks (docs/guard.md); the guard itself is
``serl.run.guard``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from serl import ConfigError
from serl.config.options import option as _f
from serl.run.guard_rule import RULES

MODES = ("off", "watch", "stop", "rollback")


# The options that change what a guarded run does: a resume must keep them (SeRL's RecipeSpec.resume_fixed).
GUARD_OPTIONS = (
    "collapse_guard",
    "guard_probe",
    "guard_probe_data",
    "guard_k",
    "guard_every",
    "guard_margin",
    "guard_patience",
    "guard_alpha",
    "guard_lr_scale",
    "guard_max_rollbacks",
    "guard_anchor",
    "guard_labels",
)


@dataclass
class GuardOptions:
    """Options of the collapse guard (mixed into a recipe's config that supports it)."""

    collapse_guard: str = _f(
        "off",
        "collapse guard: off, watch (log what it would do), stop (end at a "
        "collapse, keep the best policy) or rollback (reload it, lower the LR)",
        choices=MODES,
    )
    guard_probe: int = _f(64, "guard: training prompts in the fixed probe (drawn with --seed)")
    guard_probe_data: str = _f(
        "",
        "guard: draw the probe from this problem file (same keys as --prompt_data; "
        "labels only read with --guard_labels) instead of the training prompts",
    )
    guard_k: int = _f(8, "guard: answers the untrained model samples per probe prompt for its vote (the anchor)")
    guard_every: int = _f(2, "guard: check the policy's greedy answers on the probe every N steps (and at the end)")
    guard_margin: float = _f(
        0.10, "guard: a check is bad when agreement fell this far below its best (0: the drop's test alone decides)"
    )
    guard_patience: int = _f(2, "guard: bad checks in a row that fire it (was 1 before the spent rule)")
    guard_alpha: float = _f(
        0.05,
        "guard: false-alarm budget; with --guard_rule spent for the whole run, with "
        "per_check for each check (a bad check needs one-sided McNemar p below its "
        "share; 1 = no test)",
    )
    guard_rule: str = _f(
        "spent",
        "guard: spent (--guard_alpha spread over the run's planned checks) or "
        "per_check (every check at --guard_alpha: the rule before issue 61)",
        choices=RULES,
    )
    guard_checks: int = _f(0, "guard: planned checks --guard_alpha is spread over (0 = from --steps and --guard_every)")
    guard_lr_scale: float = _f(0.5, "guard rollback: multiply the learning rate by this at each rollback (1 = no cut)")
    guard_lr_floor: float = _f(0.0, "guard rollback: the cumulative LR scale never goes below this (0 = no floor)")
    guard_max_rollbacks: int = _f(2, "guard rollback: after this many rollbacks the next firing stops the run")
    guard_anchor: str = _f(
        "",
        "guard: reuse this anchor file (another run's guard_anchor.jsonl; same probe, "
        "model, --generate_max_len and --system_prompt) instead of sampling one",
    )
    guard_labels: bool = _f(
        False,
        "guard: score the probe against the seed labels instead of the anchor "
        "(labelled mode, reported apart from the label-free one)",
    )

    def validate_guard(self) -> None:
        for name in ("guard_probe", "guard_k", "guard_every", "guard_patience"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.guard_margin < 1.0:
            raise ConfigError(f"guard_margin: must lie in [0, 1), got {self.guard_margin}")
        if not 0.0 < self.guard_alpha <= 1.0:
            raise ConfigError(f"guard_alpha: must lie in (0, 1], got {self.guard_alpha}")
        if self.guard_checks < 0:
            raise ConfigError(f"guard_checks: must be >= 0 (0 = from --steps), got {self.guard_checks}")
        if not 0.0 <= self.guard_lr_floor <= 1.0:
            raise ConfigError(f"guard_lr_floor: must lie in [0, 1], got {self.guard_lr_floor}")
        if not 0.0 < self.guard_lr_scale <= 1.0:
            raise ConfigError(f"guard_lr_scale: must lie in (0, 1], got {self.guard_lr_scale}")
        if self.guard_max_rollbacks < 0:
            raise ConfigError(f"guard_max_rollbacks: must be >= 0, got {self.guard_max_rollbacks}")
        common: Any = self  # TrainConfig's options, beside this mixin's
        if self.collapse_guard in ("stop", "rollback") and (common.learner != "torch" or common.ray):
            raise ConfigError(
                f"collapse_guard: {self.collapse_guard} reloads the kept policy into the learner, "
                f"which only the one-process torch learner can (got --learner {common.learner}"
                f"{' with --ray' if common.ray else ''}); use watch, or --learner torch"
            )
