"""Log-probabilities (and entropies) of target tokens from logits, a block of rows at a time.

The plain way, ``logits.float()`` then ``logsumexp`` and ``gather`` (and a softmax for
the entropy), makes several full-size fp32 copies of ``[N, V]`` logits, and its
backward builds more (a zero-filled ``[N, V]`` for the gather, the softmax, the cast
back). With SmolLM2's 49,152-token vocabulary, 2,000 response tokens are 400 MB per
fp32 copy, and on a CPU these passes over memory cost about as much as the LM head's
matmul.

``token_logprobs`` reads the logits in their own dtype, ``ROWS`` rows at a time, and
keeps only the fp32 working block, the per-row log-sum-exp and the result:

    log p(y_i) = z_{i,y_i} / T - logsumexp_j(z_{ij} / T)
    entropy_i  = logsumexp_i - sum_j softmax_ij * z_ij / T   (not differentiated)
    d log p(y_i) / d z_ij = (onehot(y_i)_j - softmax_ij) / T

The gradient is written straight into one tensor of the logits' dtype (bf16 logits get
bf16 gradients, as autograd through ``.float()`` would give).
"""
from __future__ import annotations

import torch
from torch import Tensor

ROWS = 64  # rows per block: 64 x 49,152 fp32 is 12.6 MB of working memory


class _TokenLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor, temperature: float, want_entropy: bool):
        n = logits.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=logits.device)
        lse = torch.empty_like(logp)
        ent = torch.empty_like(logp) if want_entropy else None
        inv_t = 1.0 / temperature
        for s in range(0, n, ROWS):
            z = logits[s:s + ROWS].float()  # (no copy when fp32: never modified in place)
            if inv_t != 1.0:
                z = z * inv_t
            m = torch.logsumexp(z, dim=-1)
            lse[s:s + ROWS] = m
            logp[s:s + ROWS] = z.gather(-1, targets[s:s + ROWS, None]).squeeze(-1) - m
            if ent is not None:
                p = torch.exp(z - m[:, None])
                ent[s:s + ROWS] = m - (p * z).sum(-1)
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
        for s in range(0, logits.shape[0], ROWS):
            z = logits[s:s + ROWS].float()
            if inv_t != 1.0:
                z = z * inv_t
            gs = g[s:s + ROWS, None]
            block = torch.exp(z - lse[s:s + ROWS, None]).mul_(gs.neg())  # -g * softmax (a new tensor)
            block.scatter_add_(1, targets[s:s + ROWS, None], gs)  # + g at the target
            grad[s:s + ROWS] = block
        return grad, None, None, None


def token_logprobs(logits: Tensor, targets: Tensor, temperature: float = 1.0,
                   want_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
    """fp32 ``[N]`` log-probs of ``targets`` under ``logits / temperature`` (``[N, V]``,
    any float dtype), and their entropies if ``want_entropy`` (without gradient)."""
    if logits.dim() != 2 or targets.shape != logits.shape[:1]:
        raise ValueError(f"token_logprobs: logits [N, V] and targets [N], got {tuple(logits.shape)} "
                         f"and {tuple(targets.shape)}")
    return _TokenLogprobs.apply(logits, targets, float(temperature), bool(want_entropy))


def reference_token_logprobs(logits: Tensor, targets: Tensor, temperature: float = 1.0,
                             want_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
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
