"""Attention over packed sequences: several sequences in one row, each attending only
to its own earlier tokens.

A packed micro-batch (``serl.engines.micro``) is one row of ``T = sum(seq_lens)``
tokens. A dense block-diagonal causal mask over it would cost ``T²`` attention work;
instead, this attention splits queries, keys and values at the sequence boundaries and
runs causal SDPA on each piece (``sum(len²)`` work, as padded rows would), through
transformers' own ``sdpa_attention_forward`` so GQA and scaling follow the model.

It is installed as a transformers attention implementation (``AttentionInterface``)
named ``serl_varlen``. transformers builds no mask for an implementation it does not
know, so the model is called with ``attention_mask=None``, the packed ``position_ids``
(rotary positions restart at 0 for each sequence) and ``serl_seq_lens``, which the
decoder layers pass through to the attention as a keyword.

Models whose attention is not plain causal SDPA (sliding windows shorter than a
sequence, logit soft-capping, attention sinks) are refused with an error, never run
with the wrong attention.
"""
from __future__ import annotations

import torch
from torch import Tensor

VARLEN = "serl_varlen"
_calls = [0]  # attention calls so far: the scorer checks that the model routed through us


def varlen_attention(module, query: Tensor, key: Tensor, value: Tensor, attention_mask, dropout: float = 0.0,
                     scaling: float | None = None, **kwargs) -> tuple[Tensor, None]:
    """Causal attention within each packed sequence. query: [1, H, T, D]; key, value:
    [1, Hkv, T, D]; returns [1, T, H, D] as transformers' attention functions do."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    lens = kwargs.get("serl_seq_lens")
    if lens is None:
        raise RuntimeError(f"{VARLEN} attention called without serl_seq_lens: this model does not pass "
                           "attention keywords through its layers; set LearnerConfig.pack=False")
    if attention_mask is not None or query.shape[0] != 1 or sum(lens) != query.shape[2]:
        raise RuntimeError(f"{VARLEN}: expected one packed row of {sum(lens)} tokens and no mask, got "
                           f"query {tuple(query.shape)}, mask {attention_mask is not None}")
    window = kwargs.get("sliding_window")
    if window is not None and max(lens) > window:
        raise ValueError(f"{VARLEN}: a sequence of {max(lens)} tokens exceeds the model's sliding window "
                         f"({window}); set LearnerConfig.pack=False")
    for name in ("softcap", "s_aux"):
        if kwargs.get(name) is not None:
            raise ValueError(f"{VARLEN}: the model's attention uses {name}; set LearnerConfig.pack=False")
    _calls[0] += 1
    if len(lens) == 1:
        return sdpa_attention_forward(module, query, key, value, None, dropout=dropout, scaling=scaling,
                                      is_causal=True)
    outs = [sdpa_attention_forward(module, q, k, v, None, dropout=dropout, scaling=scaling, is_causal=True)[0]
            for q, k, v in zip(query.split(lens, 2), key.split(lens, 2), value.split(lens, 2))]
    return torch.cat(outs, dim=1), None


def use_varlen(lm) -> None:
    """Switch ``lm`` (a transformers causal LM) to packed attention, or raise why not."""
    from transformers import AttentionInterface

    AttentionInterface.register(VARLEN, varlen_attention)
    config = lm.config
    if getattr(config, "attn_logit_softcapping", None):
        raise ValueError(f"{type(lm).__name__}: soft-capped attention is not supported with packing; "
                         "set LearnerConfig.pack=False")
    can = getattr(lm, "_can_set_attn_implementation", None)
    if can is None or not can():
        raise ValueError(f"{type(lm).__name__} does not take pluggable attention (transformers' "
                         "AttentionInterface); set LearnerConfig.pack=False")
    lm.set_attn_implementation(VARLEN)
    if config._attn_implementation != VARLEN:
        raise ValueError(f"{type(lm).__name__}: could not switch attention to {VARLEN}; "
                         "set LearnerConfig.pack=False")


def packed_forward(model, input_ids: Tensor, position_ids: Tensor, seq_lens: tuple[int, ...]):
    """``model`` (the decoder stack or the whole LM) over one packed row; its output."""
    before = _calls[0]
    out = model(input_ids=input_ids, position_ids=position_ids, attention_mask=None, use_cache=False,
                serl_seq_lens=tuple(int(n) for n in seq_lens))
    if _calls[0] == before:
        raise RuntimeError(f"{type(model).__name__} ran without {VARLEN} attention: packed sequences would "
                           "attend across each other; set LearnerConfig.pack=False")
    return out
