"""KL estimators between the policy and the reference model, per token.

With Δ = log π(a) − log π_ref(a) for a sampled token a ~ π (Schulman, "Approximating
KL divergence", 2020):

- ``k1`` = Δ              unbiased, high variance, can be negative
- ``k2`` = Δ² / 2         biased, low variance, ≥ 0
- ``k3`` = e^{−Δ} − 1 + Δ  unbiased, low variance, ≥ 0

The estimate is capped to [−clip, clip] (``--kl_clip``, default ``KL_CLIP``), as OpenRLHF
does at 10 for every estimator in both its reward and loss paths. Without the cap one
badly off token can dominate a step: k3 at Δ = −5 is 142.4 with gradient −147.4, k2 at
Δ = +8 is 32. Beyond the cap the estimate is constant, so such a token adds ``clip`` to
the loss and nothing to the gradient; inside it nothing changes. docs/algorithms.md has
the measurement the default was chosen from.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

KL_ESTIMATORS = ("k1", "k2", "k3")
_ALIASES = {"kl": "k1", "low_var_kl": "k3", "k1": "k1", "k2": "k2", "k3": "k3"}
KL_CLIP = 10.0  # the default cap of every KL estimate (TrainConfig.kl_clip, LearnerConfig.kl_clip)


def canonical_kl(kind: str) -> str:
    """Map an estimator name (or an alias such as ``low_var_kl``) to k1/k2/k3."""
    try:
        return _ALIASES[kind.lower()]
    except KeyError:
        raise ValueError(f"unknown KL estimator {kind!r}; expected one of {sorted(_ALIASES)}") from None


def check_kl_clip(clip: float) -> float:
    """``clip`` as a float, or ValueError: the cap must be a positive finite number."""
    clip = float(clip)
    if not (clip > 0 and math.isfinite(clip)):
        raise ValueError(f"KL cap must be a positive finite number, got {clip}")
    return clip


def kl_estimate(logp: Tensor, ref_logp: Tensor, kind: str = "k1", clip: float = KL_CLIP) -> Tensor:
    """Per-token KL estimate capped to [−clip, clip], same shape as ``logp`` (mask it yourself)."""
    if logp.shape != ref_logp.shape:
        raise ValueError(f"logp {tuple(logp.shape)} and ref_logp {tuple(ref_logp.shape)} differ")
    clip = check_kl_clip(clip)
    delta = logp.float() - ref_logp.float()
    k = canonical_kl(kind)
    if k == "k1":
        est = delta
    elif k == "k2":
        est = 0.5 * delta * delta
    else:
        # Below −log(2·clip + 2), k3 is already above the cap (its root x of e^x − 1 − x = clip
        # has x ≤ log(clip + 1 + x) ≤ log(2·clip + 2)), so bounding Δ there changes no value
        # and keeps e^{−Δ} finite: an infinite derivative times the cap's zero would be NaN.
        d = delta.clamp(min=-math.log(2.0 * clip + 2.0))
        est = torch.expm1(-d) + d  # expm1 keeps precision when Δ ≈ 0
    return est.clamp(-clip, clip)


def padded_kl(logp: list[Tensor], ref_logp: list[Tensor], mask: Tensor, clip: float = KL_CLIP) -> Tensor:
    """Per-token k1 KL of ragged per-sequence log-probs, as a [B, T] tensor zero past each
    sequence's end (``mask``): the penalty a recipe puts in the reward."""

    def pad(seqs):
        out = torch.zeros_like(mask)
        for i, s in enumerate(seqs):
            out[i, : len(s)] = s.float()
        return out

    return kl_estimate(pad(logp), pad(ref_logp), "k1", clip) * mask
