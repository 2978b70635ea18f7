"""Policy losses as pure functions: PPO-clip (for Reinforce++/GRPO/RLOO) and DPO variants."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

LOSS_AGGREGATIONS = ("token_mean", "seq_mean", "seq_sum_const")
LOG_RATIO_CLAMP = 20.0  # e^20 ≈ 5e8: large enough never to matter, small enough not to overflow


def aggregate(
    values: Tensor,
    mask: Tensor,
    agg: str = "token_mean",
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    const: float | None = None,
) -> Tensor:
    """Reduce per-token ``values`` [B, T] to a scalar.

    ``token_mean``: sum over every response token / number of tokens. ``seq_mean``: mean
    over sequences of each sequence's token mean. ``seq_sum_const``: mean over sequences
    of each sequence's token sum divided by the constant ``const`` (Dr.GRPO, Liu et al.,
    2025, "Understanding R1-Zero-Like Training": the constant, usually the generation
    limit, replaces the per-sequence length that biases the gradient by length).
    ``num_tokens`` / ``num_seqs`` replace the denominators when this micro-batch is one
    part of a larger step, so that the micro-batch losses add up to the loss of the
    whole step.
    """
    mask = mask.to(values.dtype)
    if agg == "seq_sum_const":
        if const is None or not const > 0:
            raise ValueError(f"loss aggregation seq_sum_const needs a constant > 0, got {const!r}")
        n = float(values.shape[0] if num_seqs is None else num_seqs)
        return (values * mask).sum() / (float(const) * max(n, 1.0))
    if agg == "token_mean":
        denom = mask.sum() if num_tokens is None else values.new_tensor(float(num_tokens))
        return (values * mask).sum() / denom.clamp(min=1.0)
    if agg == "seq_mean":
        per_seq = (values * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        denom = per_seq.new_tensor(float(values.shape[0] if num_seqs is None else num_seqs))
        return per_seq.sum() / denom.clamp(min=1.0)
    raise ValueError(f"unknown loss aggregation {agg!r}; expected one of {LOSS_AGGREGATIONS}")


def ppo_clip_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    agg: str = "token_mean",
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    const: float | None = None,
    weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped surrogate loss −min(ρA, clip(ρ, 1−eps_low, 1+eps_high)A) (Schulman et al. 2017).

    Separate low/high ε follow DAPO's "clip-higher". Metrics are over masked tokens of
    this call: ``clip_frac`` (tokens whose clipped term won, hence carry no gradient),
    ``approx_kl`` (k3 estimate of KL(old‖new)), ``ratio`` (mean ρ). ``weights`` (detached, per
    token) multiply each token's loss before aggregation: the importance weights of ``serl.algos.tis``.
    """
    if not (logp.shape == old_logp.shape == advantages.shape == mask.shape):
        raise ValueError(
            "logp, old_logp, advantages and mask must share one shape, got "
            f"{tuple(logp.shape)}, {tuple(old_logp.shape)}, "
            f"{tuple(advantages.shape)}, {tuple(mask.shape)}"
        )
    log_ratio = (logp - old_logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    surr = ratio * advantages
    surr_clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * advantages
    per_token = -torch.minimum(surr, surr_clipped)
    if weights is not None:
        per_token = per_token * weights
    loss = aggregate(per_token, mask, agg, num_tokens, num_seqs, const)
    with torch.no_grad():
        m = mask.to(logp.dtype)
        n = m.sum().clamp(min=1.0)
        clipped = (surr_clipped < surr).to(logp.dtype)
        metrics = {
            "clip_frac": float((clipped * m).sum() / n),
            "approx_kl": float(((torch.expm1(log_ratio) - log_ratio) * m).sum() / n),
            "ratio": float((ratio * m).sum() / n),
        }
    return loss, metrics


DPO_LOSS_TYPES = ("sigmoid", "hinge", "ipo")


def dpo_loss(
    policy_chosen_logp: Tensor,
    policy_rejected_logp: Tensor,
    ref_chosen_logp: Tensor,
    ref_rejected_logp: Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
    loss_type: str = "sigmoid",
) -> tuple[Tensor, dict[str, float]]:
    """DPO-family loss on sequence log-probs [B], averaged over pairs.

    With h = (π_c − ref_c) − (π_r − ref_r), the log-ratio margin of each pair:

    - ``sigmoid``: −log σ(β·h) (DPO, Rafailov et al. 2023). ``label_smoothing`` ε > 0
      gives conservative DPO (cDPO, Mitchell 2023): −(1−ε)·log σ(β·h) − ε·log σ(−β·h).
      SPIN's logistic loss (Chen et al. 2024) is this with chosen = the real answer,
      rejected = the model's own answer and ref = the previous iteration's model.
    - ``hinge``: max(0, 1 − β·h), the hinge option of the SPIN reference trainer
      (uclaml/SPIN, ``spin/alignment/trainer.py``; from RSO, Liu et al. 2023).
    - ``ipo``: (h − 1/(2β))², IPO (Azar et al. 2023, eq. 17, β there called τ). It
      regresses h to a finite target instead of pushing it to infinity. This function
      takes h as given; serl's ``dpo`` objective passes log-probs *summed* over each
      response, as for the other loss types. TRL's DPOTrainer instead divides each
      response's log-ratio by its token count for IPO (a per-token mean), so the same β
      sets a target per token there and per sequence here: β = 0.5, a 4-token chosen
      answer with log-ratio sum 2 and a 2-token rejected one with −1 give (3 − 1)² = 4
      here and (0.5 + 0.5 − 1)² = 0 in TRL (docs/algorithms.md).

    ``label_smoothing`` only has a meaning for ``sigmoid`` and is refused elsewhere.
    Metrics (β-scaled implicit rewards, as in TRL/SPIN): ``reward_chosen``,
    ``reward_rejected``, ``reward_accuracy`` (fraction of pairs with chosen > rejected),
    ``reward_margin``.
    """
    if loss_type not in DPO_LOSS_TYPES:
        raise ValueError(f"unknown DPO loss type {loss_type!r}; expected one of {DPO_LOSS_TYPES}")
    if not beta > 0:  # also catches NaN
        raise ValueError(f"DPO beta must be > 0, got {beta}")
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"DPO label_smoothing must be in [0, 0.5), got {label_smoothing}")
    if label_smoothing and loss_type != "sigmoid":
        raise ValueError(f"DPO label_smoothing applies only to loss type 'sigmoid', not {loss_type!r}")
    shapes = {tuple(t.shape) for t in (policy_chosen_logp, policy_rejected_logp, ref_chosen_logp, ref_rejected_logp)}
    if len(shapes) != 1:
        raise ValueError(f"DPO log-probs must share one shape [B], got {sorted(shapes)}")
    chosen_ratio = policy_chosen_logp - ref_chosen_logp
    rejected_ratio = policy_rejected_logp - ref_rejected_logp
    h = chosen_ratio - rejected_ratio
    if loss_type == "sigmoid":
        losses = -(1.0 - label_smoothing) * F.logsigmoid(beta * h) - label_smoothing * F.logsigmoid(-beta * h)
    elif loss_type == "hinge":
        losses = torch.relu(1.0 - beta * h)
    else:
        losses = (h - 1.0 / (2.0 * beta)) ** 2
    loss = losses.mean()
    with torch.no_grad():
        chosen = beta * chosen_ratio
        rejected = beta * rejected_ratio
        metrics = {
            "reward_chosen": float(chosen.mean()),
            "reward_rejected": float(rejected.mean()),
            "reward_accuracy": float((chosen > rejected).float().mean()),
            "reward_margin": float((chosen - rejected).mean()),
        }
    return loss, metrics
