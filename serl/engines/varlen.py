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

**Shared prompts** (``LearnerConfig.share_prompts``; the idea of Z. Liu et al., "Prefix
Grouper: Efficient GRPO Training through Shared-Prefix Forward", 2025, arXiv:2506.05433,
written anew here): a row holds blocks of one prompt followed by several of its
responses, described by ``serl_shared`` ((prompt length, response lengths) per block).
The prompt attends causally to itself; each response attends to the whole prompt and to
its own earlier tokens, never to another response (keys ``[prompt; own]``, causal with
the diagonal moved right by the prompt's length). The prompt runs once, and backward
sums into it the gradients from all its responses, so the numbers equal running each
(prompt, response) alone. On CPU kernels each piece runs as above; the flash-attn path
runs the row in one varlen call whose key sequences are ``[prompt; own]`` gathered
(flash-attn >= 2.1 aligns a causal mask of fewer queries than keys bottom-right).

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


def varlen_attention(
    module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask,
    dropout: float = 0.0,
    scaling: float | None = None,
    kernel: str = "auto",
    **kwargs,
) -> tuple[Tensor, None]:
    """Causal attention within each packed sequence. query: [1, H, T, D]; key, value:
    [1, Hkv, T, D]; returns [1, T, H, D] as transformers' attention functions do."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    lens = kwargs.get("serl_seq_lens")
    if lens is None:  # an ordinary call of the model (not the scorer's): plain SDPA
        pos = kwargs.get("position_ids")
        if attention_mask is None and pos is not None and pos.shape[-1] > 1 and not bool((pos.diff(dim=-1) == 1).all()):
            raise RuntimeError(
                f"{VARLEN}: packed position_ids without serl_seq_lens (the sequence lengths); "
                "the model would attend across sequences"
            )
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling)
    if attention_mask is not None or query.shape[0] != 1 or sum(lens) != query.shape[2]:
        raise RuntimeError(
            f"{VARLEN}: expected one packed row of {sum(lens)} tokens and no mask, got "
            f"query {tuple(query.shape)}, mask {attention_mask is not None}"
        )
    shared = kwargs.get("serl_shared")
    span = max(lens) if shared is None else max(p + max(rs, default=0) for p, rs in shared)
    window = kwargs.get("sliding_window")
    if window is not None and span > window:
        raise ValueError(
            f"{VARLEN}: a sequence of {span} tokens exceeds the model's sliding window "
            f"({window}); set LearnerConfig.pack=False"
        )
    for name in ("softcap", "s_aux"):
        if kwargs.get(name) is not None:
            raise ValueError(f"{VARLEN}: the model's attention uses {name}; set LearnerConfig.pack=False")
    _calls[0] += 1
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    if shared is not None:
        if kernel == "flash_attention_2":
            return _flash_shared(query, key, value, shared, scale, dropout), None
        return _shared_pieces(module, query, key, value, shared, kernel, scale, dropout), None
    if kernel == "flash_attention_2":
        return _flash_varlen(query, key, value, lens, scale, dropout), None
    outs = [
        _piece(module, q, k, v, kernel, scale, dropout)
        for q, k, v in zip(query.split(lens, 2), key.split(lens, 2), value.split(lens, 2))
    ]
    return (outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)), None


def _piece(module, q: Tensor, k: Tensor, v: Tensor, kernel: str, scale: float, dropout: float) -> Tensor:
    """Causal attention of one piece, [1, n, H, D]; with more keys than queries (a response
    after its shared prompt) query i sees keys up to ``len(keys) - n + i``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if _eager_piece(kernel, q, bool(dropout and module.training), k.shape[2]):
        return _grouped_eager(q, k, v, scale)
    n, m = q.shape[2], k.shape[2]
    if n == m:
        return sdpa_attention_forward(module, q, k, v, None, dropout=dropout, scaling=scale, is_causal=True)[0]
    allowed = torch.ones(n, m, dtype=torch.bool, device=q.device).tril_(m - n)  # SDPA's is_causal is top-left
    return sdpa_attention_forward(module, q, k, v, allowed, dropout=dropout, scaling=scale, is_causal=False)[0]


def _shared_pieces(
    module, query: Tensor, key: Tensor, value: Tensor, shared, kernel: str, scale: float, dropout: float
) -> Tensor:
    """Each block's prompt, then each response against ``[prompt; own]`` keys; [1, T, H, D]."""
    lens = [n for p, rs in shared for n in (p, *rs)]
    qs, ks, vs = query.split(lens, 2), key.split(lens, 2), value.split(lens, 2)
    outs, j = [], 0
    for _, rs in shared:
        kp, vp = ks[j], vs[j]
        outs.append(_piece(module, qs[j], kp, vp, kernel, scale, dropout))
        for a in range(j + 1, j + 1 + len(rs)):
            outs.append(
                _piece(module, qs[a], torch.cat((kp, ks[a]), 2), torch.cat((vp, vs[a]), 2), kernel, scale, dropout)
            )
        j += 1 + len(rs)
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)


def _eager_piece(kernel: str, q: Tensor, dropout: bool, keys: int) -> bool:
    """Whether this piece's attention runs as grouped eager (else SDPA); eager has no dropout.
    Up to EAGER_MAX_LEN keys: a response after a long shared prompt has many, and bf16
    eager rounded more there (SmolLM2, 2 x 800-token prompts with 8 responses each: largest
    log-prob error against fp32 0.43 eager, 0.30 SDPA, 0.27 per sequence)."""
    if dropout or kernel == "sdpa":
        return False
    if kernel == "eager":
        return True
    return q.device.type == "cpu" and q.dtype == torch.bfloat16 and keys <= EAGER_MAX_LEN


def _flash_varlen(query: Tensor, key: Tensor, value: Tensor, lens, scale: float, dropout: float) -> Tensor:
    """All sequences of the row in one flash-attn varlen call; returns [1, T, H, D].
    flash-attn takes [T, H, D] with key/value heads shared by query groups (as repeat_kv)."""
    from flash_attn import flash_attn_varlen_func

    q, k, v = _flash_inputs(query, key, value)
    cu = _cu_seqlens(tuple(lens), q.device)
    out = flash_attn_varlen_func(
        q, k, v, cu, cu, max(lens), max(lens), dropout_p=dropout, softmax_scale=scale, causal=True
    )
    return out.unsqueeze(0)


def _flash_inputs(query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """[1, H, T, D] -> [T, H, D] in bf16/fp16, as flash-attn takes them."""
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))
    if q.dtype not in (torch.float16, torch.bfloat16):  # fp32 rotary output under autocast
        dev = q.device.type
        if not torch.is_autocast_enabled(dev):
            raise RuntimeError(
                f"{impl_name('flash_attention_2')}: flash-attn computes in bf16/fp16, got {q.dtype} outside autocast"
            )
        dt = torch.get_autocast_dtype(dev)
        q, k, v = q.to(dt), k.to(dt), v.to(dt)
    return q, k, v


def _flash_shared(query: Tensor, key: Tensor, value: Tensor, shared, scale: float, dropout: float) -> Tensor:
    """A shared-prompt row in one flash-attn varlen call: query pieces as laid out, key and
    value pieces ``[prompt; own]`` gathered (the prompt's copied once per response); the
    causal mask of a response piece is aligned bottom-right. Returns [1, T, H, D]."""
    from flash_attn import flash_attn_varlen_func

    q, k, v = _flash_inputs(query, key, value)
    keys, cu_q, cu_k, max_q, max_k = _shared_index(tuple(shared), q.device)
    out = flash_attn_varlen_func(
        q,
        k.index_select(0, keys),
        v.index_select(0, keys),
        cu_q,
        cu_k,
        max_q,
        max_k,
        dropout_p=dropout,
        softmax_scale=scale,
        causal=True,
    )
    return out.unsqueeze(0)


def _shared_index(shared: tuple, device):
    """For ``_flash_shared``: the row position of each gathered key, the query and key
    pieces' cumulative starts (int32) and their longest lengths; cached like ``_cu_seqlens``."""
    ck = ("shared", shared, str(device))
    if ck not in _cu:
        if len(_cu) > 64:
            _cu.clear()
        keys, q_lens, k_lens, start = [], [], [], 0
        for p, rs in shared:
            prompt = list(range(start, start + p))
            keys += prompt
            q_lens.append(p)
            k_lens.append(p)
            at = start + p
            for r in rs:
                keys += prompt + list(range(at, at + r))
                q_lens.append(r)
                k_lens.append(p + r)
                at += r
            start = at
        cum = lambda ns: torch.tensor(
            [0, *torch.tensor(ns).cumsum(0).tolist()],
            dtype=torch.int32,  # noqa: E731
            device=device,
        )
        _cu[ck] = (
            torch.tensor(keys, dtype=torch.long, device=device),
            cum(q_lens),
            cum(k_lens),
            max(q_lens),
            max(k_lens),
        )
    return _cu[ck]


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
    [1, Hkv, m, D] (m >= n: the last n keys are the queries' own); returns [1, n, H, D]."""
    _, h, n, d = q.shape
    hkv, m = k.shape[1], k.shape[2]
    qg = (q[0] * scale).reshape(hkv, (h // hkv) * n, d)  # heads h = kv * group + g, as repeat_kv
    scores = torch.matmul(qg, k[0].transpose(1, 2)).view(hkv, h // hkv, n, m) + _causal_bias(n, m, q)
    probs = torch.softmax(scores, -1)  # accumulates in fp32, writes bf16: no separate cast pass
    out = torch.matmul(probs.view(hkv, (h // hkv) * n, m), v[0])
    return out.view(h, n, d).transpose(0, 1).unsqueeze(0)


_bias: dict = {}


def _causal_bias(n: int, m: int, like: Tensor) -> Tensor:
    """[n, m] additive mask: query i sees keys up to m - n + i."""
    key = (n, m, like.dtype, like.device)
    if key not in _bias:
        if len(_bias) > 64:
            _bias.clear()
        _bias[key] = torch.full((n, m), float("-inf"), dtype=like.dtype, device=like.device).triu_(m - n + 1)
    return _bias[key]


def use_varlen(lm, kernel: str = "auto") -> None:
    """Switch ``lm`` (a transformers causal LM) to packed attention running ``kernel``,
    or raise why not."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    if kernel not in KERNELS:
        raise ValueError(f"packed attention kernel must be one of {KERNELS}, got {kernel!r}")
    name = impl_name(kernel)
    AttentionInterface.register(
        name, varlen_attention if kernel == "auto" else partial(varlen_attention, kernel=kernel)
    )
    AttentionMaskInterface.register(name, _mask)
    config = lm.config
    if getattr(config, "attn_logit_softcapping", None):
        raise ValueError(
            f"{type(lm).__name__}: soft-capped attention is not supported with packing; set LearnerConfig.pack=False"
        )
    can = getattr(lm, "_can_set_attn_implementation", None)
    if can is None or not can():
        raise ValueError(
            f"{type(lm).__name__} does not take pluggable attention (transformers' "
            "AttentionInterface); set LearnerConfig.pack=False"
        )
    lm.set_attn_implementation(name)
    if config._attn_implementation != name:
        raise ValueError(f"{type(lm).__name__}: could not switch attention to {name}; set LearnerConfig.pack=False")


def _mask(*args, **kwargs):
    """The mask transformers builds for this implementation: SDPA's for an ordinary padded
    call, none when there is no padding mask (causal, or packed: the attention splits)."""
    from transformers.masking_utils import sdpa_mask

    return None if kwargs.get("attention_mask") is None else sdpa_mask(*args, **kwargs)


def packed_forward(model, input_ids: Tensor, position_ids: Tensor, seq_lens: tuple[int, ...], shared=None):
    """``model`` (the decoder stack or the whole LM) over one packed row; its output.
    ``shared``: the row's shared-prompt blocks, (prompt length, response lengths) each."""
    before = _calls[0]
    extra = {}
    if shared is not None:
        extra["serl_shared"] = tuple((int(p), tuple(int(r) for r in rs)) for p, rs in shared)
        if tuple(p + sum(rs) for p, rs in extra["serl_shared"]) != tuple(seq_lens):
            raise ValueError(
                f"shared-prompt blocks {extra['serl_shared']} do not add up to the row's "
                f"block lengths {tuple(seq_lens)}"
            )
    out = model(
        input_ids=input_ids,
        position_ids=position_ids,
        attention_mask=None,
        use_cache=False,
        serl_seq_lens=tuple(int(n) for n in seq_lens),
        **extra,
    )
    if _calls[0] == before:
        raise RuntimeError(
            f"{type(model).__name__} ran without {VARLEN} attention: packed sequences would "
            "attend across each other; set LearnerConfig.pack=False"
        )
    return out
