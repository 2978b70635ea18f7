"""Log-probabilities (and entropies) of target tokens from logits, a block of rows at a time.

The plain way, ``logits.float()`` then ``logsumexp`` and ``gather`` (and a softmax for
the entropy), makes several full-size fp32 copies of ``[N, V]`` logits, and its
backward builds more (a zero-filled ``[N, V]`` for the gather, the softmax, the cast
back). With SmolLM2's 49,152-token vocabulary, 2,000 response tokens are 400 MB per
fp32 copy, and on a CPU these passes over memory cost about as much as the LM head's
matmul.

``token_logprobs`` reads the logits in their own dtype, a block of rows at a time, and
keeps only the fp32 working block, the per-row log-sum-exp and the result. A block holds
about ``BLOCK_ELEMS`` logits (``block_rows``), so that it stays in the core's cache while
the cast, the exponential and the sums pass over it: on a 2-core Zen 4 with Qwen's
151,936-token vocabulary, blocks of 3-8 rows instead of 64 (39 MB) made the forward and
the backward 4-7x faster (bench/README.md, issue 46):

    log p(y_i) = z_{i,y_i} / T - logsumexp_j(z_{ij} / T)
    entropy_i  = logsumexp_i - sum_j softmax_ij * z_ij / T   (not differentiated)
    d log p(y_i) / d z_ij = (onehot(y_i)_j - softmax_ij) / T

The gradient is written straight into one tensor of the logits' dtype (bf16 logits get
bf16 gradients, as autograd through ``.float()`` would give).
"""

from __future__ import annotations

import torch
from torch import Tensor

BLOCK_ELEMS = 2**20  # logits per block: 4 MB of fp32, within the cache once split over the threads


def block_rows(vocab: int) -> int:
    """Rows per block for a vocabulary of ``vocab`` (at least 1)."""
    return max(1, BLOCK_ELEMS // max(1, vocab))


def _scaled_block(logits: Tensor, s: int, e: int, inv_t: float) -> Tensor:
    """Rows s:e as a fresh fp32 tensor (safe to change in place), divided by the temperature."""
    z = logits[s:e].to(torch.float32, copy=True)
    return z.mul_(inv_t) if inv_t != 1.0 else z


class _TokenLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor, temperature: float, want_entropy: bool):
        n = logits.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=logits.device)
        lse = torch.empty_like(logp)
        ent = torch.empty_like(logp) if want_entropy else None
        inv_t = 1.0 / temperature
        rows = block_rows(logits.shape[1])
        for s in range(0, n, rows):
            z = _scaled_block(logits, s, s + rows, inv_t)
            m = z.amax(dim=-1, keepdim=True).clamp_(min=torch.finfo(torch.float32).min)  # a row of -inf stays finite
            p = (z - m).exp_()  # exp(z - max): the softmax before it is normalised
            total = p.sum(-1)
            block_lse = m.squeeze(-1) + total.log()
            lse[s : s + rows] = block_lse
            logp[s : s + rows] = z.gather(-1, targets[s : s + rows, None]).squeeze(-1) - block_lse
            if ent is not None:  # the normalised softmax's own exp, as before blocks were cache-sized (same bits)
                ent[s : s + rows] = block_lse - torch.sub(z, block_lse[:, None]).exp_().mul_(z).sum(-1)
        ctx.save_for_backward(logits, targets, lse)
        ctx.inv_t = inv_t
        if ent is not None:
            ctx.mark_non_differentiable(ent)
        return logp, ent

    @staticmethod
    def backward(ctx, g_logp: Tensor, g_ent):
        logits, targets, lse = ctx.saved_tensors
        inv_t = ctx.inv_t
        grad = torch.empty_like(logits)
        g = g_logp.float() * inv_t
        rows = block_rows(logits.shape[1])
        for s in range(0, logits.shape[0], rows):
            gs = g[s : s + rows, None]
            block = _scaled_block(logits, s, s + rows, inv_t)
            block.sub_(lse[s : s + rows, None]).exp_().mul_(gs.neg())  # -g * softmax, in place
            block.scatter_add_(1, targets[s : s + rows, None], gs)  # + g at the target
            grad[s : s + rows] = block
        return grad, None, None, None


def token_logprobs(
    logits: Tensor, targets: Tensor, temperature: float = 1.0, want_entropy: bool = False
) -> tuple[Tensor, Tensor | None]:
    """fp32 ``[N]`` log-probs of ``targets`` under ``logits / temperature`` (``[N, V]``,
    any float dtype), and their entropies if ``want_entropy`` (without gradient)."""
    if logits.dim() != 2 or targets.shape != logits.shape[:1]:
        raise ValueError(
            f"token_logprobs: logits [N, V] and targets [N], got {tuple(logits.shape)} and {tuple(targets.shape)}"
        )
    return _TokenLogprobs.apply(logits, targets, float(temperature), bool(want_entropy))


def reference_token_logprobs(
    logits: Tensor, targets: Tensor, temperature: float = 1.0, want_entropy: bool = False
) -> tuple[Tensor, Tensor | None]:
    """The same through plain full-size tensor ops (the numerics ``token_logprobs`` is
    tested against, and the path with ``LearnerConfig.fused_logprobs=False``)."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    lse = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets[:, None]).squeeze(-1) - lse
    ent = None
    if want_entropy:
        with torch.no_grad():
            ent = lse - (torch.softmax(logits, -1) * logits).sum(-1)
    return logp, ent
