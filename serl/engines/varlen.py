"""Attention over packed sequences: several sequences in one row, each attending only
to its own earlier tokens.

A packed micro-batch (``serl.engines.micro``) is one row of ``T = sum(seq_lens)``
tokens. A dense block-diagonal causal mask over it would cost ``T²`` attention work;
instead, this attention splits queries, keys and values at the sequence boundaries and
runs causal attention on each piece (``sum(len²)`` work, as padded rows would): short
bf16 pieces on a CPU by plain matmuls (faster than SDPA's CPU flash kernel there, see
``EAGER_MAX_LEN``), the rest through transformers' own ``sdpa_attention_forward``.

It is installed as a transformers attention implementation (``AttentionInterface``)
named ``serl_varlen``. The scorer calls the model with ``attention_mask=None``, the
packed ``position_ids`` (rotary positions restart at 0 for each sequence) and
``serl_seq_lens``, which the decoder layers pass through to the attention as a keyword;
for that call no mask is built. Any other call of the model (no ``serl_seq_lens``) gets
transformers' SDPA mask and plain SDPA, as before the switch.

Models whose attention is not plain causal SDPA (sliding windows shorter than a
sequence, logit soft-capping, attention sinks) are refused with an error, never run
with the wrong attention.
"""
from __future__ import annotations

import torch
from torch import Tensor

VARLEN = "serl_varlen"
# On a CPU, bf16 sequences up to this length take grouped eager attention (plain matmuls
# and a softmax over the [n, n] scores), longer ones SDPA's flash kernel. On a 2-core Zen 4
# (no AMX), fwd+bwd of 4 x 384 tokens took 43 ms eager against 83 ms flash, 2 x 640
# 60 against 81, 2 x 768 128 against 91 (the scores outgrow the cache).
EAGER_MAX_LEN = 512
_calls = [0]  # attention calls so far: the scorer checks that the model routed through us


def varlen_attention(module, query: Tensor, key: Tensor, value: Tensor, attention_mask, dropout: float = 0.0,
                     scaling: float | None = None, **kwargs) -> tuple[Tensor, None]:
    """Causal attention within each packed sequence. query: [1, H, T, D]; key, value:
    [1, Hkv, T, D]; returns [1, T, H, D] as transformers' attention functions do."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    lens = kwargs.get("serl_seq_lens")
    if lens is None:  # an ordinary call of the model (not the scorer's): plain SDPA
        pos = kwargs.get("position_ids")
        if attention_mask is None and pos is not None and pos.shape[-1] > 1 and not bool((pos.diff(dim=-1) == 1).all()):
            raise RuntimeError(f"{VARLEN}: packed position_ids without serl_seq_lens (the sequence lengths); "
                               "the model would attend across sequences")
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling)
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
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    outs = []
    for q, k, v in zip(query.split(lens, 2), key.split(lens, 2), value.split(lens, 2)):
        if (query.device.type == "cpu" and query.dtype == torch.bfloat16 and q.shape[2] <= EAGER_MAX_LEN
                and not (dropout and module.training)):
            outs.append(_grouped_eager(q, k, v, scale))
        else:
            outs.append(sdpa_attention_forward(module, q, k, v, None, dropout=dropout, scaling=scale,
                                               is_causal=True)[0])
    return (outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)), None


def _grouped_eager(q: Tensor, k: Tensor, v: Tensor, scale: float) -> Tensor:
    """Causal softmax attention of one sequence by plain matmuls; each key/value head
    serves its group of query heads without being repeated. q: [1, H, n, D], k and v:
    [1, Hkv, n, D]; returns [1, n, H, D]."""
    _, h, n, d = q.shape
    hkv = k.shape[1]
    qg = (q[0] * scale).reshape(hkv, (h // hkv) * n, d)  # heads h = kv * group + g, as repeat_kv
    scores = torch.matmul(qg, k[0].transpose(1, 2)).view(hkv, h // hkv, n, n) + _causal_bias(n, q)
    probs = torch.softmax(scores, -1)  # accumulates in fp32, writes bf16: no separate cast pass
    out = torch.matmul(probs.view(hkv, (h // hkv) * n, n), v[0])
    return out.view(h, n, d).transpose(0, 1).unsqueeze(0)


_bias: dict = {}


def _causal_bias(n: int, like: Tensor) -> Tensor:
    key = (n, like.dtype, like.device)
    if key not in _bias:
        if len(_bias) > 64:
            _bias.clear()
        _bias[key] = torch.full((n, n), float("-inf"), dtype=like.dtype, device=like.device).triu_(1)
    return _bias[key]


def use_varlen(lm) -> None:
    """Switch ``lm`` (a transformers causal LM) to packed attention, or raise why not."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(VARLEN, varlen_attention)
    AttentionMaskInterface.register(VARLEN, _mask)
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


def _mask(*args, **kwargs):
    """The mask transformers builds for this implementation: SDPA's for an ordinary padded
    call, none when there is no padding mask (causal, or packed: the attention splits)."""
    from transformers.masking_utils import sdpa_mask

    return None if kwargs.get("attention_mask") is None else sdpa_mask(*args, **kwargs)


def packed_forward(model, input_ids: Tensor, position_ids: Tensor, seq_lens: tuple[int, ...]):
    """``model`` (the decoder stack or the whole LM) over one packed row; its output."""
    before = _calls[0]
    out = model(input_ids=input_ids, position_ids=position_ids, attention_mask=None, use_cache=False,
                serl_seq_lens=tuple(int(n) for n in seq_lens))
    if _calls[0] == before:
        raise RuntimeError(f"{type(model).__name__} ran without {VARLEN} attention: packed sequences would "
                           "attend across each other; set LearnerConfig.pack=False")
    return out
