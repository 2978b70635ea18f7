"""Advantage estimators, registered by name.

Every estimator turns a sequence reward r_i (scored at the last response token) into a
per-token advantage [B, T] in two stages:

1. a *sequence score* s_i from the rewards and the prompt groups (``group_ids``):
   ``reinforce`` s = r; ``reinforce_baseline`` and ``dr_grpo`` s = r − mean_g;
   ``group_norm`` s = (r − mean_g)/(std_g + ε); ``rloo`` s = r − (Σ_g r − r)/(n_g − 1);
2. either a *token return* (reinforce, reinforce_baseline, rloo): per-token reward
   R_t = −β·KL_t plus s at the last response token, G_t = Σ_{k≥t} γ^{k−t} R_k over the
   positions of the row (OpenRLHF's ``get_cumulative_returns``; masked positions carry
   no reward but still count as steps for γ), or a plain *broadcast* of s to every
   response token (group_norm, dr_grpo: their KL goes into the loss, ``use_kl_loss``).

Then optional whitening (x − mean)/(std + ε) over all response tokens of the batch —
call this on what is trained on, after the difficulty filter.

Groups that carry no signal — one member, or every member with the same reward — give
exactly zero advantage in the group estimators, KL term included, and they do not enter
the whitening statistics (whitening would otherwise shift them to −mean/std and push
the policy for no reason). Use ``use_kl_loss`` when the KL must also act on them.
Plain ``reinforce`` has no groups; it relies on whitening for its baseline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

ScoreFn = Callable[[Tensor, Tensor, float], Tensor]  # (rewards, group index, eps) -> score


@dataclass(frozen=True)
class Estimator:
    """One registered estimator: how to score sequences and what to do with the score."""

    score: ScoreFn
    token_return: bool  # True: KL-shaped discounted return; False: broadcast the score
    whiten: bool  # default of the ``whiten`` argument
    grouped: bool  # True: degenerate groups get zero advantage


ADVANTAGE_ESTIMATORS: dict[str, Estimator] = {}
_ALIASES: dict[str, str] = {}


def _key(name: str) -> str:
    return name.strip().lower().replace("-", "_")


def register_estimator(name: str, est: Estimator, aliases: tuple[str, ...] = ()) -> None:
    """Add an estimator (recipes plug their own in here) under ``name`` and ``aliases``."""
    ADVANTAGE_ESTIMATORS[name] = est
    for a in (name, *aliases):
        _ALIASES[_key(a)] = name


def canonical_estimator(name: str) -> str:
    """The registry name for ``name`` or one of its SeRL/OpenRLHF aliases."""
    try:
        return _ALIASES[_key(name)]
    except KeyError:
        raise ValueError(f"unknown advantage estimator {name!r}; known: {', '.join(sorted(_ALIASES))}") from None


def group_stats(rewards: Tensor, gidx: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per-sequence group size, group sum, group mean and unbiased group std."""
    k = int(gidx.max()) + 1 if gidx.numel() else 0
    count = torch.zeros(k, dtype=rewards.dtype).scatter_add_(0, gidx, torch.ones_like(rewards))
    total = torch.zeros(k, dtype=rewards.dtype).scatter_add_(0, gidx, rewards)
    mean = total / count
    sq = torch.zeros(k, dtype=rewards.dtype).scatter_add_(0, gidx, (rewards - mean[gidx]) ** 2)
    std = (sq / (count - 1).clamp(min=1)).sqrt()
    return count[gidx], total[gidx], mean[gidx], std[gidx]


def degenerate_groups(rewards: Tensor, gidx: Tensor) -> Tensor:
    """Bool [B]: the sequence's group has one member or all-equal rewards."""
    k = int(gidx.max()) + 1 if gidx.numel() else 0
    hi = torch.full((k,), -torch.inf, dtype=rewards.dtype).scatter_reduce_(0, gidx, rewards, "amax")
    lo = torch.full((k,), torch.inf, dtype=rewards.dtype).scatter_reduce_(0, gidx, rewards, "amin")
    count = torch.bincount(gidx, minlength=k)
    return (count[gidx] < 2) | (hi[gidx] == lo[gidx])


def _score_reinforce(r: Tensor, g: Tensor, eps: float) -> Tensor:
    return r


def _score_centered(r: Tensor, g: Tensor, eps: float) -> Tensor:
    return r - group_stats(r, g)[2]


def _score_group_norm(r: Tensor, g: Tensor, eps: float) -> Tensor:
    _, _, mean, std = group_stats(r, g)
    return (r - mean) / (std + eps)


def _score_rloo(r: Tensor, g: Tensor, eps: float) -> Tensor:
    count, total, _, _ = group_stats(r, g)
    return r - (total - r) / (count - 1).clamp(min=1)


# Whitening defaults follow the reference code for each method, except RLOO: SeRL's fork
# whitens it, OpenRLHF 0.11 does not. We default to *not* whitening RLOO: its
# leave-one-out baseline is already unbiased per group, and subtracting a batch-wide
# token mean re-introduces a shift that depends on response lengths.
register_estimator(
    "reinforce",
    Estimator(_score_reinforce, True, True, False),
    ("reinforce++", "reinforce_plus_plus", "reinforce_pp", "reinforcepp"),
)
register_estimator(
    "reinforce_baseline",
    Estimator(_score_centered, True, True, True),
    ("reinforce++_baseline", "reinforce_plus_plus_baseline", "reinforce_pp_baseline"),
)
register_estimator("group_norm", Estimator(_score_group_norm, False, False, True), ("grpo",))
register_estimator("dr_grpo", Estimator(_score_centered, False, False, True), ("dr.grpo", "drgrpo"))
register_estimator("rloo", Estimator(_score_rloo, True, False, True), ())


def discounted_returns(token_rewards: Tensor, gamma: float) -> Tensor:
    """G_t = Σ_{k≥t} γ^{k−t} R_k along the last dimension."""
    if gamma == 1.0:
        return token_rewards.flip(-1).cumsum(-1).flip(-1)
    out = torch.zeros_like(token_rewards)
    running = torch.zeros_like(token_rewards[..., 0])
    for t in range(token_rewards.shape[-1] - 1, -1, -1):
        running = token_rewards[..., t] + gamma * running
        out[..., t] = running
    return out


def masked_whiten(x: Tensor, mask: Tensor, eps: float) -> Tensor:
    """(x − mean)/(std + eps) over the tokens where ``mask``; zero elsewhere.

    Population (biased) variance, as OpenRLHF; a constant input gives zeros, not NaN.
    """
    m = mask.to(x.dtype)
    n = m.sum()
    if n == 0:
        return torch.zeros_like(x)
    mean = (x * m).sum() / n
    std = ((((x - mean) * m) ** 2).sum() / n).sqrt()
    return (x - mean) / (std + eps) * m


def _check(rewards: Tensor, group_ids: Tensor, mask: Tensor, kl: Tensor | None) -> None:
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [B], got shape {tuple(rewards.shape)}")
    if group_ids.shape != rewards.shape:
        raise ValueError(f"group_ids shape {tuple(group_ids.shape)} != rewards {tuple(rewards.shape)}")
    if group_ids.dtype.is_floating_point or group_ids.dtype == torch.bool:
        raise ValueError(f"group_ids must be an integer tensor, got {group_ids.dtype}")
    if mask.dim() != 2 or mask.shape[0] != rewards.shape[0]:
        raise ValueError(f"mask must be [B, T] with B={rewards.shape[0]}, got {tuple(mask.shape)}")
    if kl is not None and kl.shape != mask.shape:
        raise ValueError(f"kl shape {tuple(kl.shape)} != mask {tuple(mask.shape)}")
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards contain NaN or inf")


def compute_advantages(
    name: str,
    rewards: Tensor,
    group_ids: Tensor,
    mask: Tensor,
    kl: Tensor | None = None,
    kl_coef: float = 0.0,
    gamma: float = 1.0,
    whiten: bool | None = None,
    eps: float = 1e-6,
) -> Tensor:
    """Per-token advantages [B, T] (zero where ``mask`` is 0); see the module docstring.

    ``whiten=None`` uses the estimator's default (reinforce, reinforce_baseline: on;
    group_norm, dr_grpo, rloo: off).
    """
    est = ADVANTAGE_ESTIMATORS[canonical_estimator(name)]
    _check(rewards, group_ids, mask, kl)
    mask_f = mask.to(torch.float32)
    b, t = mask.shape
    if b == 0:
        return torch.zeros(b, t)
    r = rewards.to(torch.float32)
    gidx = torch.unique(group_ids, return_inverse=True)[1]
    score = est.score(r, gidx, eps)
    keep = torch.ones(b, dtype=torch.bool)
    if est.grouped:
        keep = ~degenerate_groups(r, gidx)
        score = torch.where(keep, score, torch.zeros_like(score))

    if est.token_return:
        token_r = torch.zeros(b, t)
        if kl_coef:
            if kl is None:
                raise ValueError("kl_coef > 0 needs the per-token kl tensor")
            token_r = -kl_coef * kl.to(torch.float32) * mask_f
        has_tokens = mask_f.sum(-1) > 0
        last = t - 1 - mask_f.flip(-1).argmax(-1)  # index of the last response token
        rows = torch.arange(b)[has_tokens]
        token_r[rows, last[has_tokens]] += score[has_tokens]
        adv = discounted_returns(token_r, gamma) * mask_f
    else:
        if kl_coef:
            raise ValueError(
                f"{canonical_estimator(name)} puts the KL in the loss (use_kl_loss), not in the reward: set kl_coef=0"
            )
        adv = score[:, None] * mask_f

    adv = adv * keep[:, None]
    if est.whiten if whiten is None else whiten:
        adv = masked_whiten(adv, mask_f * keep[:, None], eps)
    return adv
