"""KL estimators between the policy and the reference model, per token.

With Δ = log π(a) − log π_ref(a) for a sampled token a ~ π (Schulman, "Approximating
KL divergence", 2020):

- ``k1`` = Δ              unbiased, high variance, can be negative
- ``k2`` = Δ² / 2         biased, low variance, ≥ 0
- ``k3`` = e^{−Δ} − 1 + Δ  unbiased, low variance, ≥ 0

Δ is clamped to [−clamp, clamp] first, so one badly off token cannot blow up the
estimate (e^{−Δ} overflows quickly).
"""
from __future__ import annotations

import torch
from torch import Tensor

KL_ESTIMATORS = ("k1", "k2", "k3")
_ALIASES = {"kl": "k1", "low_var_kl": "k3", "k1": "k1", "k2": "k2", "k3": "k3"}


def canonical_kl(kind: str) -> str:
    """Map an estimator name (or an alias such as ``low_var_kl``) to k1/k2/k3."""
    try:
        return _ALIASES[kind.lower()]
    except KeyError:
        raise ValueError(f"unknown KL estimator {kind!r}; expected one of "
                         f"{sorted(_ALIASES)}") from None


def kl_estimate(logp: Tensor, ref_logp: Tensor, kind: str = "k1", clamp: float = 10.0) -> Tensor:
    """Per-token KL estimate, same shape as ``logp`` (mask it yourself)."""
    if logp.shape != ref_logp.shape:
        raise ValueError(f"logp {tuple(logp.shape)} and ref_logp {tuple(ref_logp.shape)} differ")
    delta = (logp.float() - ref_logp.float()).clamp(-clamp, clamp)
    k = canonical_kl(kind)
    if k == "k1":
        return delta
    if k == "k2":
        return 0.5 * delta * delta
    return torch.expm1(-delta) + delta  # expm1 keeps precision when Δ ≈ 0
