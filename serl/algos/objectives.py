"""Training objectives, registered by name; a recipe picks one and every learner runs it.

An objective turns one micro-batch's policy log-probs into a loss that is that micro-
batch's share of the whole step's loss (denominators are the step's totals), plus metric
sums that add up over micro-batches (and ranks). ``Objective.metrics`` says what each sum
is divided by at the end: ``tokens``, ``pairs`` or nothing (``sum``).

- ``ppo_clip``: the clipped surrogate (Reinforce++, GRPO, RLOO, Dr.GRPO) with an optional
  KL-to-reference loss term (GRPO's ``use_kl_loss``: ``kl_loss_coef`` > 0), each token's
  estimate capped at ``kl_clip`` (``actor/kl_capped``: the share of tokens at the cap).
- ``pg``: the plain policy gradient −A·log π (no ratio, no clipping).
- ``dpo``: DPO on (chosen, rejected) pairs of sequences (``sigmoid``, ``hinge``, ``ipo``;
  label smoothing), with policy and reference log-probs summed over response tokens, for
  every loss type; TRL averages them per token for ``ipo`` (docs/algorithms.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from serl.algos.kl import kl_estimate
from serl.algos.losses import aggregate, dpo_loss, ppo_clip_loss
from serl.algos.tis import IS_METRICS, tis_metrics, tis_weights


@dataclass
class ObjectiveInput:
    """One micro-batch, padded to [b, R] (R: its longest response)."""

    logp: Tensor  # policy log-probs of the response tokens (with grad)
    mask: Tensor  # True on response tokens
    advantages: Tensor | None = None
    old_logp: Tensor | None = None  # None: on-policy, the ratio is exactly 1
    ref_logp: Tensor | None = None
    pairs: Tensor | None = None  # [P, 2] rows of (chosen, rejected) in this micro-batch
    behaviour_logp: Tensor | None = None  # the generator's log-probs (NaN: unknown); None: no correction
    num_tokens: float = 1.0  # totals over the whole optimizer step
    num_seqs: float = 1.0
    num_pairs: float = 1.0


@dataclass(frozen=True)
class Objective:
    name: str
    fn: Callable  # (ObjectiveInput, LearnerConfig) -> (loss, {metric: sum})
    metrics: dict = field(default_factory=dict)  # metric -> "tokens" | "pairs" | "sum"
    units: str = "sequences"  # what micro-batches must keep whole: "sequences" or "pairs"

    def needs_ref(self, cfg) -> bool:
        return self.name == "dpo" or (self.name == "ppo_clip" and cfg.kl_loss_coef > 0)


OBJECTIVES: dict[str, Objective] = {}


def register_objective(name: str, metrics: dict, units: str = "sequences"):
    def wrap(fn):
        OBJECTIVES[name] = Objective(name, fn, dict(metrics), units)
        return fn

    return wrap


def get_objective(name: str) -> Objective:
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; known: {', '.join(OBJECTIVES)}")
    return OBJECTIVES[name]


def _importance(inp: ObjectiveInput, old: Tensor, cfg) -> tuple[Tensor | None, dict[str, float]]:
    """The TIS weights (serl.algos.tis) when the learner has a cap and the batch behaviour log-probs."""
    if not getattr(cfg, "is_cap", 0.0) or inp.behaviour_logp is None:
        return None, {}
    w = tis_weights(old, inp.behaviour_logp, cfg.is_cap)
    return w, tis_metrics(w, inp.mask, cfg.is_cap)


@register_objective(
    "ppo_clip",
    {
        "loss/policy": "sum",
        "loss/kl": "sum",
        "actor/clip_frac": "tokens",
        "actor/approx_kl": "tokens",
        "actor/ratio": "tokens",
        "actor/kl_capped": "tokens",
    }
    | IS_METRICS,
)
def ppo_clip(inp: ObjectiveInput, cfg) -> tuple[Tensor, dict[str, float]]:
    old = inp.logp.detach() if inp.old_logp is None else inp.old_logp
    w, is_sums = _importance(inp, old, cfg)
    loss, m = ppo_clip_loss(
        inp.logp,
        old,
        inp.advantages,
        inp.mask,
        cfg.eps_clip_low,
        cfg.eps_clip_high,
        cfg.loss_agg,
        num_tokens=inp.num_tokens,
        num_seqs=inp.num_seqs,
        const=cfg.loss_agg_const,
        weights=w,
    )
    sums = {"loss/policy": loss.item(), "loss/kl": 0.0} | is_sums
    if cfg.kl_loss_coef > 0:
        kl = kl_estimate(inp.logp, inp.ref_logp, cfg.kl_estimator, cfg.kl_clip)
        kl_term = aggregate(kl, inp.mask, cfg.loss_agg, inp.num_tokens, inp.num_seqs, cfg.loss_agg_const)
        sums["loss/kl"] = kl_term.item()
        # share of tokens at the cap (they add no gradient): a cap that bites often is a sign of drift
        sums["actor/kl_capped"] = float(((kl.detach().abs() >= cfg.kl_clip) & inp.mask.bool()).sum())
        loss = loss + cfg.kl_loss_coef * kl_term
    w = float(inp.mask.sum())
    for k in ("clip_frac", "approx_kl", "ratio"):
        sums[f"actor/{k}"] = m[k] * w
    return loss, sums


@register_objective("pg", {"loss/policy": "sum"} | IS_METRICS)
def policy_gradient(inp: ObjectiveInput, cfg) -> tuple[Tensor, dict[str, float]]:
    old = inp.logp.detach() if inp.old_logp is None else inp.old_logp
    w, is_sums = _importance(inp, old, cfg)
    per_token = -inp.logp * inp.advantages
    loss = aggregate(
        per_token if w is None else per_token * w,
        inp.mask,
        cfg.loss_agg,
        inp.num_tokens,
        inp.num_seqs,
        cfg.loss_agg_const,
    )
    return loss, {"loss/policy": loss.item()} | is_sums


DPO_ARGS = ("beta", "loss_type", "label_smoothing")


@register_objective(
    "dpo",
    {
        "loss/policy": "sum",
        "dpo/reward_chosen": "pairs",
        "dpo/reward_rejected": "pairs",
        "dpo/accuracy": "pairs",
        "dpo/margin": "pairs",
        "dpo/chosen_logp": "pairs",
        "dpo/rejected_logp": "pairs",
    },
    units="pairs",
)
def dpo(inp: ObjectiveInput, cfg) -> tuple[Tensor, dict[str, float]]:
    args = dict(cfg.objective_args)
    unknown = sorted(set(args) - set(DPO_ARGS))
    if unknown:  # a misspelt setting would otherwise train with the default silently
        raise ValueError(f"dpo objective: unknown objective_args {unknown}; known: {', '.join(DPO_ARGS)}")
    m = inp.mask.to(inp.logp.dtype)
    seq = (inp.logp * m).sum(-1)
    ref = (inp.ref_logp * m).sum(-1)
    assert inp.pairs is not None, "the dpo objective needs the batch's pairs"
    c, r = inp.pairs[:, 0], inp.pairs[:, 1]
    loss, met = dpo_loss(
        seq[c],
        seq[r],
        ref[c],
        ref[r],
        beta=float(args.get("beta", 0.1)),
        label_smoothing=float(args.get("label_smoothing", 0.0)),
        loss_type=str(args.get("loss_type", "sigmoid")),
    )
    n = float(len(c))
    loss = loss * (n / inp.num_pairs)  # this micro-batch's share of the mean over all pairs
    with torch.no_grad():
        per_tok = seq.detach() / m.sum(-1).clamp(min=1.0)
    return loss, {
        "loss/policy": loss.item(),
        "dpo/reward_chosen": met["reward_chosen"] * n,
        "dpo/reward_rejected": met["reward_rejected"] * n,
        "dpo/accuracy": met["reward_accuracy"] * n,
        "dpo/margin": met["reward_margin"] * n,
        "dpo/chosen_logp": float(per_tok[c].sum()),
        "dpo/rejected_logp": float(per_tok[r].sum()),
    }


__all__ = ["OBJECTIVES", "Objective", "ObjectiveInput", "get_objective", "register_objective"]
