"""The engines' one way to load a model's weights: a Hugging Face directory, as
``serl.models.resolve.resolve_model`` leaves every model, loaded in float32 unless told."""

from __future__ import annotations


def load_causal_lm(path: str, dtype=None, attn_implementation: str | None = None):
    import torch
    from transformers import AutoModelForCausalLM

    kw = {"attn_implementation": attn_implementation} if attn_implementation else {}
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype or torch.float32, **kw)
