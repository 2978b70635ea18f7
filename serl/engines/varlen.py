"""Attention over packed sequences: several sequences in one row, each attending only
to its own earlier tokens.

A packed micro-batch (``serl.engines.micro``) is one row of ``T = sum(seq_lens)``
tokens. A dense block-diagonal causal mask over it would cost ``T²`` attention work;
instead, this attention splits queries, keys and values at the sequence boundaries and
runs causal attention on each piece (``sum(len²)`` work, as padded rows would): short
bf16 pieces on a CPU by plain matmuls (faster than SDPA's CPU flash kernel there, see
``EAGER_MAX_LEN``), the rest through transformers' own ``sdpa_attention_forward``.

On CUDA with flash-attn (``serl.engines.attention`` decides) the whole row instead goes
through one ``flash_attn_varlen_func`` call with the sequences' ``cu_seqlens``: no Python
loop over sequences, no per-sequence kernel launches.

It is installed as a transformers attention implementation (``AttentionInterface``)
named ``serl_varlen`` (``serl_varlen_eager``, ``_torch``, ``_fa2`` for the other kernels, see
``KERNELS``). The scorer calls the model with ``attention_mask=None``, the
packed ``position_ids`` (rotary positions restart at 0 for each sequence) and
``serl_seq_lens``, which the decoder layers pass through to the attention as a keyword;
for that call no mask is built. Any other call of the model (no ``serl_seq_lens``) gets
transformers' SDPA mask and plain SDPA, as before the switch.

Models whose attention is not plain causal SDPA (sliding windows shorter than a
sequence, logit soft-capping, attention sinks) are refused with an error, never run
with the wrong attention.
"""
from __future__ import annotations

from functools import partial

import torch
from torch import Tensor

VARLEN = "serl_varlen"
# what runs on a packed row: auto (grouped eager for short bf16 sequences on a CPU, else
# SDPA), eager or SDPA per sequence, or flash-attn's varlen kernel over the whole row
KERNELS = ("auto", "eager", "sdpa", "flash_attention_2")
# On a CPU, bf16 sequences up to this length take grouped eager attention (plain matmuls
# and a softmax over the [n, n] scores), longer ones SDPA's flash kernel. On a 2-core Zen 4
# (no AMX), fwd+bwd of 4 x 384 tokens took 43 ms eager against 83 ms flash, 2 x 640
# 60 against 81, 2 x 768 128 against 91 (the scores outgrow the cache).
EAGER_MAX_LEN = 512
_calls = [0]  # attention calls so far: the scorer checks that the model routed through us


# transformers implementation names; they avoid "flash" and "sdpa", which transformers
# matches as substrings to treat a model as running its own FlashAttention or SDPA
_NAMES = {"auto": VARLEN, "eager": f"{VARLEN}_eager", "sdpa": f"{VARLEN}_torch", "flash_attention_2": f"{VARLEN}_fa2"}


def impl_name(kernel: str) -> str:
    """The transformers implementation name of ``kernel``'s packed attention."""
    return _NAMES[kernel]


def varlen_attention(module, query: Tensor, key: Tensor, value: Tensor, attention_mask, dropout: float = 0.0,
                     scaling: float | None = None, kernel: str = "auto", **kwargs) -> tuple[Tensor, None]:
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
    if kernel == "flash_attention_2":
        return _flash_varlen(query, key, value, lens, scale, dropout), None
    outs = []
    for q, k, v in zip(query.split(lens, 2), key.split(lens, 2), value.split(lens, 2)):
        if _eager_piece(kernel, q, dropout and module.training):
            outs.append(_grouped_eager(q, k, v, scale))
        else:
            outs.append(sdpa_attention_forward(module, q, k, v, None, dropout=dropout, scaling=scale,
                                               is_causal=True)[0])
    return (outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)), None


def _eager_piece(kernel: str, q: Tensor, dropout: bool) -> bool:
    """Whether this sequence's attention runs as grouped eager (else SDPA); eager has no dropout."""
    if dropout or kernel == "sdpa":
        return False
    if kernel == "eager":
        return True
    return q.device.type == "cpu" and q.dtype == torch.bfloat16 and q.shape[2] <= EAGER_MAX_LEN


def _flash_varlen(query: Tensor, key: Tensor, value: Tensor, lens, scale: float, dropout: float) -> Tensor:
    """All sequences of the row in one flash-attn varlen call; returns [1, T, H, D].
    flash-attn takes [T, H, D] with key/value heads shared by query groups (as repeat_kv)."""
    from flash_attn import flash_attn_varlen_func

    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))
    if q.dtype not in (torch.float16, torch.bfloat16):  # fp32 rotary output under autocast
        dev = q.device.type
        if not torch.is_autocast_enabled(dev):
            raise RuntimeError(f"{impl_name('flash_attention_2')}: flash-attn computes in bf16/fp16, "
                               f"got {q.dtype} outside autocast")
        dt = torch.get_autocast_dtype(dev)
        q, k, v = q.to(dt), k.to(dt), v.to(dt)
    cu = _cu_seqlens(tuple(lens), q.device)
    out = flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), dropout_p=dropout,
                                 softmax_scale=scale, causal=True)
    return out.unsqueeze(0)


_cu: dict = {}


def _cu_seqlens(lens: tuple[int, ...], device) -> Tensor:
    """Cumulative sequence starts [0, n0, n0+n1, ...] as int32 on ``device``; cached, as every
    layer of one forward asks for the same."""
    key = (lens, str(device))
    if key not in _cu:
        if len(_cu) > 64:
            _cu.clear()
        starts = [0]
        for n in lens:
            starts.append(starts[-1] + n)
        _cu[key] = torch.tensor(starts, dtype=torch.int32, device=device)
    return _cu[key]


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


def use_varlen(lm, kernel: str = "auto") -> None:
    """Switch ``lm`` (a transformers causal LM) to packed attention running ``kernel``,
    or raise why not."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    if kernel not in KERNELS:
        raise ValueError(f"packed attention kernel must be one of {KERNELS}, got {kernel!r}")
    name = impl_name(kernel)
    AttentionInterface.register(name, varlen_attention if kernel == "auto" else partial(varlen_attention,
                                                                                         kernel=kernel))
    AttentionMaskInterface.register(name, _mask)
    config = lm.config
    if getattr(config, "attn_logit_softcapping", None):
        raise ValueError(f"{type(lm).__name__}: soft-capped attention is not supported with packing; "
                         "set LearnerConfig.pack=False")
    can = getattr(lm, "_can_set_attn_implementation", None)
    if can is None or not can():
        raise ValueError(f"{type(lm).__name__} does not take pluggable attention (transformers' "
                         "AttentionInterface); set LearnerConfig.pack=False")
    lm.set_attn_implementation(name)
    if config._attn_implementation != name:
        raise ValueError(f"{type(lm).__name__}: could not switch attention to {name}; "
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
