"""Truncated importance sampling (TIS): correct a policy-gradient loss for samples drawn by
another policy than the one the loss takes as "old" (an engine whose numerics differ, or the
policy a step or more ago under ``--async_train``).

Each response token's loss is multiplied by ``w = min(exp(logp_old - logp_behaviour), cap)``,
detached: the ratio of the learner's probability of the token (before this update) to the
probability the generator sampled it with, truncated from above so a token the generator
found unlikely cannot blow the gradient up (Yao et al., 2025, "Your efficient RL framework
secretly brings you off-policy RL training"). This is TRL's ``vllm_importance_sampling_correction``
with ``vllm_importance_sampling_cap`` (GRPOTrainer: ``clamp(exp(old - sampling), max=cap)``) and
OpenRLHF's ``--enable_vllm_is_correction`` of type ``tis`` with a lower threshold of 0.

A NaN behaviour log-prob means "not sampled by the generator" (a SPIN human answer): weight 1.
"""

from __future__ import annotations

import torch
from torch import Tensor

# the metrics the objectives add with the correction on (sums over tokens; max: the largest)
IS_METRICS = {"actor/is_weight_mean": "tokens", "actor/is_capped_frac": "tokens", "actor/is_weight_max": "max"}


def tis_weights(old_logp: Tensor, behaviour_logp: Tensor, cap: float) -> Tensor:
    """min(exp(old - behaviour), cap) per token, detached; 1 where behaviour is NaN."""
    known = ~torch.isnan(behaviour_logp)
    log_ratio = torch.where(known, old_logp.detach() - behaviour_logp, torch.zeros_like(old_logp))
    return torch.exp(log_ratio.clamp(max=torch.log(torch.tensor(float(cap))).item())).detach()


def tis_metrics(w: Tensor, mask: Tensor, cap: float) -> dict[str, float]:
    """Sums for IS_METRICS over the masked tokens (the learner divides by the step's tokens)."""
    m = mask.bool()
    if not m.any():
        return {"actor/is_weight_mean": 0.0, "actor/is_capped_frac": 0.0, "actor/is_weight_max": 0.0}
    return {
        "actor/is_weight_mean": float(w[m].sum()),
        "actor/is_capped_frac": float((w[m] >= cap * (1 - 1e-6)).sum()),
        "actor/is_weight_max": float(w[m].max()),
    }
