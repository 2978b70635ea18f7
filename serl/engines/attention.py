"""Which attention kernel the learner runs, decided in one place (``choose_attention``).

``LearnerConfig.attn_implementation`` (``--attn_implementation``) takes transformers'
names, as OpenRLHF's flag and TRL's ``model_init_kwargs`` do: ``eager``, ``sdpa``,
``flash_attention_2``, or ``auto`` (the default). A choice has two halves:

- ``load``: the ``attn_implementation`` the model is loaded with, used for padded
  micro-batches (``pack=False``, or a model that cannot take packed attention) and for
  ordinary calls of the model;
- ``packed``: the kernel ``serl.engines.varlen`` runs on each packed row.

``auto``:

| device | flash-attn importable | load | packed row |
|---|---|---|---|
| CPU | - | transformers' default | ``auto``: grouped eager (short bf16 sequences) or SDPA |
| CUDA, bf16 | yes | ``flash_attention_2`` | ``flash_attention_2``: one ``flash_attn_varlen_func`` per layer |
| CUDA, bf16 | no | ``sdpa`` | ``sdpa``: causal SDPA per sequence |
| CUDA, fp32 | - | ``sdpa`` | ``sdpa`` (FlashAttention computes in bf16/fp16 only) |

A forced name that cannot run here (``flash_attention_2`` on a CPU, without flash-attn,
or in fp32) is an error at start-up, never a silent switch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

IMPLEMENTATIONS = ("auto", "eager", "sdpa", "flash_attention_2")
FLASH = "flash_attention_2"


@dataclass(frozen=True)
class AttentionChoice:
    load: str | None  # attn_implementation for from_pretrained (None: transformers' default)
    packed: str  # varlen kernel for packed rows: auto | eager | sdpa | flash_attention_2
    why: str  # one line: why this choice

    def describe(self, packed: bool) -> str:
        """The start-up line: what runs, given whether the micro-batches ended up packed."""
        if packed:
            kernel = {
                "auto": "grouped eager (short bf16) / SDPA per sequence",
                "eager": "eager per sequence",
                "sdpa": "SDPA per sequence",
                FLASH: "flash_attn_varlen_func",
            }[self.packed]
            return f"packed micro-batches, {kernel} ({self.why})"
        return f"padded micro-batches, {self.load or 'transformers default'} attention ({self.why})"


def flash_attn_importable() -> tuple[bool, str]:
    """Whether flash-attn's varlen kernel imports (an installed but broken build, e.g. one
    built for another torch or CUDA, counts as absent); and why not."""
    try:
        from flash_attn import flash_attn_varlen_func  # noqa: F401
    except Exception as e:  # ImportError, or OSError/RuntimeError from a mismatched binary
        return False, f"flash-attn not importable: {type(e).__name__}: {e}"
    return True, "flash-attn importable"


def choose_attention(
    device: str, requested: str = "auto", bf16: bool = False, flash: tuple[bool, str] | None = None
) -> AttentionChoice:
    """The attention for a learner on ``device``; ``flash`` (importable, why) is looked up
    when needed (tests pass it)."""
    if requested not in IMPLEMENTATIONS:
        raise ValueError(f"attn_implementation must be one of {IMPLEMENTATIONS}, got {requested!r}")
    cuda = str(device).startswith("cuda")
    if requested in ("eager", "sdpa"):
        return AttentionChoice(requested, requested, "forced")
    if not cuda:
        if requested == FLASH:
            raise ValueError(f"attn_implementation={FLASH} needs a CUDA device (device is {device!r})")
        return AttentionChoice(None, "auto", "CPU")
    if requested == FLASH and not bf16:
        raise ValueError(f"attn_implementation={FLASH} computes in bf16/fp16 only; add --bf16 or pick sdpa")
    if not bf16:
        return AttentionChoice("sdpa", "sdpa", "CUDA, fp32: FlashAttention needs bf16")
    ok, why = flash if flash is not None else flash_attn_importable()
    if requested == FLASH and not ok:
        raise ValueError(f"attn_implementation={FLASH}: {why} (pip install 'serl[flash-attn]')")
    if ok:
        return AttentionChoice(FLASH, FLASH, "forced" if requested == FLASH else f"CUDA, bf16, {why}")
    return AttentionChoice("sdpa", "sdpa", f"CUDA, {why}")
