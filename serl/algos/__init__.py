"""Advantage estimators, KL estimators and policy losses: pure functions."""

from serl.algos.advantages import (
    ADVANTAGE_ESTIMATORS,
    Estimator,
    canonical_estimator,
    compute_advantages,
    masked_whiten,
    register_estimator,
)
from serl.algos.kl import KL_CLIP, KL_ESTIMATORS, canonical_kl, kl_estimate
from serl.algos.losses import DPO_LOSS_TYPES, LOSS_AGGREGATIONS, aggregate, dpo_loss, ppo_clip_loss

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "Estimator",
    "canonical_estimator",
    "compute_advantages",
    "masked_whiten",
    "register_estimator",
    "KL_CLIP",
    "KL_ESTIMATORS",
    "canonical_kl",
    "kl_estimate",
    "DPO_LOSS_TYPES",
    "LOSS_AGGREGATIONS",
    "aggregate",
    "dpo_loss",
    "ppo_clip_loss",
]
