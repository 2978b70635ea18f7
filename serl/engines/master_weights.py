"""bf16 compute weights with an fp32 master copy (mixed precision without autocast).

Under autocast every forward casts each fp32 weight to bf16 and every backward casts
each weight gradient back to fp32; on a CPU those casts cost about as much as the
matmuls themselves for a small model. Here the model's parameters are bf16 once and
for all, and the optimizer owns an fp32 copy of each (the master weights):

- after each backward, a post-accumulate hook adds the bf16 gradient into the master's
  fp32 gradient and frees the bf16 one, so gradient accumulation over micro-batches
  runs in fp32;
- the optimizer (AdamW, gradient clipping) works on the masters only;
- ``push`` rounds the updated masters into the bf16 parameters.

Buffers (rotary inverse frequencies) stay fp32: rounding them to bf16 would shift the
rotary angles of late positions by whole radians. This is the same recipe as
DeepSpeed's bf16 mode and Megatron's mixed precision (bf16 activations and residual
stream, fp32 optimizer state).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor


def cast_parameters(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Parameters (not buffers) of ``model`` to ``dtype``, in place; tied ones stay tied."""
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point() and p.dtype != dtype:
                p.data = p.data.to(dtype)


class MasterWeights:
    """fp32 masters of ``model``'s trainable parameters, whose own copies become ``dtype``."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype = torch.bfloat16):
        self.names: list[str] = []
        self.params: list[torch.nn.Parameter] = []
        for name, p in model.named_parameters():  # tied parameters appear once
            if p.requires_grad:
                self.names.append(name)
                self.params.append(p)
        self.masters: list[Tensor] = [p.detach().to(torch.float32, copy=True) for p in self.params]
        cast_parameters(model, dtype)
        self._hooks = [
            p.register_post_accumulate_grad_hook(self._accumulate_into(m)) for p, m in zip(self.params, self.masters)
        ]

    @staticmethod
    def _accumulate_into(master: Tensor):
        def hook(p: Tensor) -> None:
            if master.grad is None:
                master.grad = p.grad.to(torch.float32)
            else:
                master.grad.add_(p.grad)
            p.grad = None

        return hook

    @torch.no_grad()
    def push(self) -> None:
        """Round the masters into the compute parameters (after an optimizer step or a load)."""
        for p, m in zip(self.params, self.masters):
            p.copy_(m)

    def named(self) -> Iterator[tuple[str, Tensor]]:
        """The masters under the model's parameter names."""
        return zip(self.names, self.masters)
