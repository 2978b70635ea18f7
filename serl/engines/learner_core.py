"""What every learner shares: micro-batching, token log-probs and entropy, the objective
loop and its metrics. ``TorchLearner`` and ``DeepSpeedLearner`` add only what differs
(how models load, how backward and the optimizer step run, sharding, save and load).

- Sequences are sorted by length and cut into micro-batches of ``micro_batch_size``
  (``serl.engines.micro``); by default each micro-batch is packed into one row with
  attention kept inside each sequence (``serl.engines.varlen``), else padded to its own
  longest sequence. The LM head runs only on the positions that predict response tokens,
  and the log-softmax over the vocabulary runs a block of rows at a time
  (``serl.engines.token_logprobs``). Pair objectives (DPO) keep each pair in one
  micro-batch.
- Each PPO epoch is one optimizer step over the whole batch (gradient accumulation over
  micro-batches); the objective's loss is normalised over the whole batch, so the
  micro-batching does not change it.
- A non-finite loss or gradient norm skips the update: the optimizer and the LR schedule
  do not move, ``actor/skipped`` is 1.0, and the next call trains normally.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from serl.algos.kl import KL_CLIP, canonical_kl, check_kl_clip
from serl.algos.losses import LOSS_AGGREGATIONS
from serl.algos.objectives import ObjectiveInput, get_objective
from serl.algos.tis import IS_METRICS
from serl.engines.attention import IMPLEMENTATIONS, AttentionChoice, choose_attention
from serl.engines.base import TrainBatch
from serl.engines.micro import Micro, micro_batches, pad_values, rank_units
from serl.engines.token_logprobs import reference_token_logprobs, token_logprobs

log = logging.getLogger(__name__)


@dataclass
class LearnerConfig:
    """Optimisation settings of a learner (defaults follow SeRL's scripts)."""

    actor_learning_rate: float = (
        5e-7  # peak learning rate of AdamW (--actor_learning_rate; the schedule and lr_scale scale it)
    )
    weight_decay: float = 0.0  # AdamW decoupled weight decay, on matrices only (not norms)
    adam_betas: tuple[float, float] = (0.9, 0.95)  # AdamW betas (OpenRLHF's default)
    lr_warmup_ratio: float = 0.03  # fraction of total_steps with linear warm-up
    min_lr_ratio: float = 0.1  # the cosine decays to actor_learning_rate * min_lr_ratio
    total_steps: int = 100  # optimizer steps the schedule spans (after it: min LR)
    micro_batch_size: int = 4  # sequences per forward/backward pass
    micro_batch_tokens: int = (
        0  # > 0: cut micro-batches by this many tokens instead of micro_batch_size sequences (dynamic batch)
    )
    max_norm: float = 1.0  # clip the global gradient norm to this (<= 0: no clipping)
    bf16: bool = False  # bf16 compute; master weights and Adam stay fp32
    bf16_weights: bool = True  # with bf16: keep the weights in bf16 beside an fp32 master copy (TorchLearner without LoRA; with LoRA, the frozen weights in bf16), instead of autocast casting fp32 weights every pass
    pack: bool = True  # pack each micro-batch's sequences into one row (no padding); falls back to padding, with a warning, for models without pluggable attention
    share_prompts: bool = False  # write each distinct prompt once per packed micro-batch, its responses after it (Prefix Grouper); a micro-batch then holds up to micro_batch_size x the longest sequence in tokens (serl.engines.micro); needs pack, off when packing falls back to padding
    attn_implementation: str = "auto"  # auto | eager | sdpa | flash_attention_2 (serl.engines.attention)
    fused_logprobs: bool = (
        True  # log-softmax/gather over the vocabulary a block of rows at a time (False: full-size fp32 tensors)
    )
    gradient_checkpointing: bool = False  # recompute activations in backward to save memory
    eps_clip_low: float = 0.2  # PPO clip range below 1
    eps_clip_high: float = 0.2  # PPO clip range above 1 (DAPO "clip-higher" when larger)
    loss_agg: str = "token_mean"  # "token_mean" over the step, per-sequence "seq_mean", or "seq_sum_const" (Dr.GRPO)
    loss_agg_const: float = 0.0  # seq_sum_const: each sequence's token sum is divided by this (e.g. max new tokens)
    kl_loss_coef: float = (
        0.0  # > 0: add kl_loss_coef * KL(policy, ref) to the loss (GRPO style); the plan's one coefficient
    )
    kl_estimator: str = "k3"  # k1 | k2 | k3, for the KL loss term
    kl_clip: float = KL_CLIP  # cap on each token's KL estimate (serl.algos.kl)
    temperature: float = 1.0  # logits are divided by this (match the sampling temperature)
    ppo_epochs: int = 1  # optimizer steps per ``step`` call, each over the whole batch
    mini_batch_size: int = 0  # sequences per optimizer step: a batch is trained in shuffled mini-batches (0: whole)
    objective: str = "ppo_clip"  # a name in serl.algos.objectives (ppo_clip | pg | dpo)
    objective_args: dict = field(default_factory=dict)  # the objective's own settings (DPO: beta, ...)
    is_cap: float = 0.0  # > 0: truncated importance sampling on TrainBatch.behaviour_logprobs, weights capped here
    device: str = "cpu"  # where the models and batches live: cpu or cuda
    seed: int = 0  # torch seed set at construction
    lora_rank: int = 0  # LoRA adapter rank (0 = train all weights; serl.engines.lora)
    lora_alpha: float = 16.0  # LoRA scale numerator: the update is (lora_alpha / lora_rank) * B @ A
    lora_dropout: float = 0.0  # dropout on the LoRA branch's input, in update passes only
    target_modules: str = "all-linear"  # modules given adapters: all-linear or comma-separated names

    def __post_init__(self) -> None:
        if self.loss_agg not in LOSS_AGGREGATIONS:
            raise ValueError(f"LearnerConfig.loss_agg: {self.loss_agg!r} is not one of {LOSS_AGGREGATIONS}")
        if self.loss_agg == "seq_sum_const" and not self.loss_agg_const > 0:
            raise ValueError(f"LearnerConfig.loss_agg_const must be > 0 with seq_sum_const, got {self.loss_agg_const}")
        canonical_kl(self.kl_estimator)
        if self.kl_loss_coef < 0:
            raise ValueError(f"LearnerConfig.kl_loss_coef must be >= 0, got {self.kl_loss_coef}")
        try:
            check_kl_clip(self.kl_clip)
        except ValueError as e:
            raise ValueError(f"LearnerConfig.kl_clip: {e}") from None
        get_objective(self.objective)
        if self.share_prompts and not self.pack:
            raise ValueError("LearnerConfig.share_prompts needs pack=True (shared prompts live in packed rows)")
        if self.attn_implementation not in IMPLEMENTATIONS:
            raise ValueError(
                f"LearnerConfig.attn_implementation must be one of {IMPLEMENTATIONS}, got {self.attn_implementation!r}"
            )
        if self.micro_batch_tokens < 0:
            raise ValueError(f"LearnerConfig.micro_batch_tokens must be >= 0, got {self.micro_batch_tokens}")
        for name in ("micro_batch_size", "total_steps", "ppo_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"LearnerConfig.{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.lr_warmup_ratio <= 1.0 or not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError("LearnerConfig.lr_warmup_ratio and min_lr_ratio must lie in [0, 1]")
        if self.temperature <= 0:
            raise ValueError(f"LearnerConfig.temperature must be > 0, got {self.temperature}")
        if self.lora_rank < 0 or (self.lora_rank and self.lora_alpha <= 0):
            raise ValueError(
                f"LearnerConfig.lora_rank must be >= 0 and lora_alpha > 0, got {self.lora_rank}, {self.lora_alpha}"
            )
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"LearnerConfig.lora_dropout must lie in [0, 1), got {self.lora_dropout}")


def lr_multiplier(update: int, cfg: LearnerConfig) -> float:
    """LR factor for the ``update``-th optimizer step (0-based): warm-up, then cosine to min.

    Unlike Hugging Face's schedule, whose first update runs at LR 0, warm-up here uses
    (update+1)/warmup so no step is wasted.
    """
    warm = math.ceil(cfg.lr_warmup_ratio * cfg.total_steps)
    if update < warm:
        return (update + 1) / warm
    progress = min(1.0, (update - warm) / max(1, cfg.total_steps - warm))
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def learner_attention(cfg: LearnerConfig) -> AttentionChoice:
    """The attention a learner with ``cfg`` runs (``serl.engines.attention``)."""
    return choose_attention(cfg.device, cfg.attn_implementation, cfg.bf16)


def announce_attention(choice: AttentionChoice, packed: bool, rank: int = 0) -> str:
    """The start-up line saying which attention runs (logged once, by rank 0); returned."""
    line = choice.describe(packed)
    if rank == 0:
        log.info("attention: %s", line)
    return line


class Scorer(torch.nn.Module):
    """The causal LM, returning only the logits of positions that predict response tokens
    (DeepSpeed needs its engine to be the root of every forward). ``pack``: switch the
    model to packed attention running ``kernel`` if it can take it (``self.packed`` says
    if it did)."""

    def __init__(self, lm, pack: bool = False, kernel: str = "auto"):
        super().__init__()
        self.lm = lm
        self.packed = False
        if pack:
            from serl.engines.varlen import use_varlen

            try:
                use_varlen(lm, kernel)
                self.packed = True
            except ValueError as e:
                log.warning("sequence packing off, micro-batches are padded: %s", e)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None,
        rows: Tensor,
        cols: Tensor,
        position_ids: Tensor | None = None,
        seq_lens: tuple[int, ...] | None = None,
        shared: tuple | None = None,
    ) -> Tensor:
        lm = self.lm
        whole = getattr(lm.config, "final_logit_softcapping", None) or getattr(lm.config, "logit_scale", None)
        base = lm if whole else getattr(lm, lm.base_model_prefix)  # whole: the logits are transformed after the head
        if seq_lens is not None:
            from serl.engines.varlen import packed_forward

            out = packed_forward(base, input_ids, position_ids, seq_lens, shared)
        else:
            out = base(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        if whole:
            return out.logits[rows, cols]
        return lm.get_output_embeddings()(out.last_hidden_state[rows, cols])


class LearnerCore:
    """The Learner protocol's shared half. Subclasses set ``cfg``, ``pad_id``, ``device``,
    ``updates``, ``skipped_total`` and the nets, and implement the hooks below."""

    cfg: LearnerConfig
    pad_id: int = 0
    device: str = "cpu"
    rank: int = 0
    world: int = 1
    lora: Any = None  # a serl.engines.lora.LoraAdapter when training LoRA
    packed = False  # micro-batches are packed (the scorers took packed attention)
    updates: int = 0  # optimizer steps taken (a checkpoint keeps it: the schedule's position)
    skipped_total: int = 0  # updates skipped for a non-finite loss or gradient
    lr_scale = 1.0  # multiplies the schedule's LR (the collapse guard lowers it at a rollback)

    # ---- hooks ---------------------------------------------------------------------------
    def _net(self, model: str):
        """The scorer for "policy" or "ref" (raise if there is no such model)."""
        raise NotImplementedError

    def _autocast(self):
        return nullcontext()

    def _even_out(self, mbs: list[Micro]) -> list[Micro]:
        """Data parallel: pad this rank's micro-batches to the longest rank's count."""
        return mbs

    def _gather(self, mine: dict[int, Tensor]) -> dict[int, Tensor]:
        return mine

    def _all_reduce(self, sums: Tensor) -> None:
        pass

    def _zero_grad(self) -> None:
        raise NotImplementedError

    def _backward(self, loss: Tensor, finite: bool) -> None:
        raise NotImplementedError

    def _apply_update(self, lr: float, finite: bool) -> tuple[bool, float]:
        """Clip, step the optimizer at ``lr`` (unless not ``finite``); (applied, grad norm)."""
        raise NotImplementedError

    # ---- shared --------------------------------------------------------------------------
    def _micro(self, prompt_ids, response_ids, units=None) -> tuple[list[Micro], int]:
        """This rank's micro-batches (sequence indices are global) plus dummies to even out."""
        units = [[i] for i in range(len(prompt_ids))] if units is None else units
        share = self.cfg.share_prompts and self.packed
        mine = rank_units(units, prompt_ids, self.rank, self.world) if share else units[self.rank :: self.world]
        mbs = []
        if mine:
            local = [i for u in mine for i in u]
            where = {i: k for k, i in enumerate(local)}
            mbs = micro_batches(
                [prompt_ids[i] for i in local],
                [response_ids[i] for i in local],
                self.cfg.micro_batch_size,
                self.pad_id,
                units=[[where[i] for i in u] for u in mine],
                pack=self.packed,
                share_prompts=share,
                max_tokens=self.cfg.micro_batch_tokens,
            )
            for mb in mbs:
                mb.index = [local[i] for i in mb.index]
        real = len(mbs)
        return self._even_out(mbs), real

    def _dummy(self) -> Micro:
        """A one-token prompt and response: keeps a short rank in step with the others."""
        return micro_batches([[self.pad_id]], [[self.pad_id]], 1, self.pad_id, pack=self.packed)[0]

    def _token_logprobs(self, net, mb: Micro, want_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
        """Flat [N] log-probs of the response tokens (and their entropies)."""
        mb = mb.to(self.device)
        with self._autocast():
            logits = net(
                mb.input_ids, mb.attention_mask, mb.pred_rows, mb.pred_cols, mb.position_ids, mb.seq_lens, mb.shared
            )
        fn = token_logprobs if self.cfg.fused_logprobs else reference_token_logprobs
        return fn(logits, mb.targets, self.cfg.temperature, want_entropy)

    def _to_rows(self, flat: Tensor, mb: Micro) -> Tensor:
        mask = mb.resp_mask.to(flat.device)
        out = flat.new_zeros(mask.shape)
        out[mask] = flat  # row-major order matches pred_rows/pred_cols
        return out

    @torch.no_grad()
    def logprobs(
        self, prompt_ids: list[list[int]], response_ids: list[list[int]], model: str = "policy"
    ) -> list[Tensor]:
        """Log-probs of each response token under "policy" or "ref" (1-D fp32 CPU tensors);
        collective under data parallel: every rank gets the full list."""
        net = self._net(model)
        mbs, real = self._micro(prompt_ids, response_ids)
        mine: dict[int, Tensor] = {}
        with self.lora.no_dropout() if self.lora is not None else nullcontext():  # scoring: no dropout
            for k, mb in enumerate(mbs):
                rows = self._to_rows(self._token_logprobs(net, mb)[0], mb).cpu()
                if k < real:
                    for b, i in enumerate(mb.index):
                        mine[i] = rows[b, : mb.lengths[b]].clone()
        merged = self._gather(mine)
        return [merged[i] for i in range(len(prompt_ids))]

    def step(self, batch: TrainBatch) -> dict[str, float]:
        """The batch in shuffled mini-batches of ``mini_batch_size`` sequences (OpenRLHF's
        ``train_batch_size``), ``ppo_epochs`` optimizer steps each; metrics averaged."""
        obj = get_objective(batch.objective or self.cfg.objective)
        if len(self._mini_batches(batch, obj.units == "pairs")) == 1:
            return self._step(batch, obj, self.cfg.ppo_epochs)
        if batch.old_logprobs is None and obj.units == "sequences":  # later parts: the policy has moved
            batch = dataclasses.replace(batch, old_logprobs=self.logprobs(batch.prompt_ids, batch.response_ids))
        runs = [
            self._step(batch.subset(idx), obj, 1)  # epochs outside, reshuffled each (as OpenRLHF)
            for _ in range(self.cfg.ppo_epochs)
            for idx in self._mini_batches(batch, obj.units == "pairs")
        ]
        out = {k: sum(r[k] for r in runs) / len(runs) for k in runs[0]}
        out.update({k: runs[-1][k] for k in ("actor/updates", "actor/skipped_total")})
        out["actor/skipped"] = max(r["actor/skipped"] for r in runs)
        if "actor/is_weight_max" in out:
            out["actor/is_weight_max"] = max(r["actor/is_weight_max"] for r in runs)
        out["actor/tokens"] = sum(r["actor/tokens"] for r in runs)
        out["actor/steps"] = float(len(runs))
        return out

    def _mini_batches(self, batch: TrainBatch, pairs: bool) -> list[list[int]]:
        """Sequence indices of each mini-batch (a pair stays whole); the shuffle is seeded by
        the optimizer's position, which a checkpoint keeps, so a resume shuffles alike."""
        size, n = self.cfg.mini_batch_size, len(batch.pairs or []) if pairs else len(batch.response_ids)
        per = max(1, size // 2) if pairs else size
        if not size or per >= n:
            return [list(range(len(batch.response_ids)))]
        order = list(range(n))
        random.Random(self.cfg.seed * 1_000_003 + self.updates + self.skipped_total).shuffle(order)
        parts = [order[s : s + per] for s in range(0, n, per)]
        return [[i for k in p for i in (batch.pairs or [])[k]] for p in parts] if pairs else parts

    def _step(self, batch: TrainBatch, obj, epochs: int) -> dict[str, float]:
        cfg = self.cfg
        if not batch.response_ids or not any(batch.response_ids):
            raise ValueError("TrainBatch has no response tokens to train on")
        units = None
        if obj.units == "pairs":
            if not batch.pairs:
                raise ValueError(f"objective {obj.name} needs TrainBatch.pairs (chosen, rejected)")
            units = [[int(c), int(r)] for c, r in batch.pairs]
        elif batch.advantages is None:
            raise ValueError(f"objective {obj.name} needs TrainBatch.advantages")
        ref_lp = batch.ref_logprobs
        if obj.needs_ref(cfg) and ref_lp is None:
            ref_lp = self.logprobs(batch.prompt_ids, batch.response_ids, model="ref")
        old_lp = batch.old_logprobs
        if old_lp is None and epochs > 1 and obj.units == "sequences":
            old_lp = self.logprobs(batch.prompt_ids, batch.response_ids, model="policy")  # pre-update values
        mbs, real = self._micro(batch.prompt_ids, batch.response_ids, units)
        pad = lambda vals, mb, what: (
            None
            if vals is None
            else pad_values(  # noqa: E731
                vals, mb.index, mb.resp_mask, what, mb.lengths
            ).to(self.device)
        )
        behaviour = batch.behaviour_logprobs if cfg.is_cap and obj.units == "sequences" else None
        per_mb = [
            (
                pad(batch.advantages, mb, "advantages"),
                pad(old_lp, mb, "old_logprobs"),
                pad(ref_lp if obj.needs_ref(cfg) else None, mb, "ref_logprobs"),
                pad(behaviour, mb, "behaviour_logprobs"),
            )
            for mb in mbs[:real]
        ]
        paired = units if units is not None else [[i] for i in range(len(batch.response_ids))]
        totals = dict(
            num_tokens=float(sum(len(batch.response_ids[i]) for u in paired for i in u)),
            num_seqs=float(sum(len(u) for u in paired)),
            num_pairs=float(len(units or [])) or 1.0,
        )
        keys = [k for k in obj.metrics if k not in IS_METRICS or behaviour is not None]  # IS: only when on
        runs = [self._one_update(obj, keys, mbs, real, per_mb, totals) for _ in range(epochs)]
        metrics = {k: sum(r[k] for r in runs) / len(runs) for k in runs[0]}
        metrics["actor/skipped"] = max(r["actor/skipped"] for r in runs)
        if "actor/is_weight_max" in metrics:
            metrics["actor/is_weight_max"] = max(r["actor/is_weight_max"] for r in runs)
        metrics["actor/skipped_total"] = float(self.skipped_total)
        metrics["actor/updates"] = float(self.updates)
        metrics["actor/tokens"] = totals["num_tokens"]
        return metrics

    def _one_update(self, obj, keys: list[str], mbs: list[Micro], real: int, per_mb, totals: dict) -> dict[str, float]:
        cfg = self.cfg
        sums = torch.zeros(len(keys) + 2, dtype=torch.float64)  # + entropy, + non-finite losses
        self._zero_grad()
        net = self._net("policy")
        for k, mb in enumerate(mbs):
            flat, ent = self._token_logprobs(net, mb, want_entropy=True)
            logp = self._to_rows(flat, mb)
            if k >= real:  # a dummy pass: zero weight, but the same collectives as the others
                self._backward(logp.sum() * 0.0, True)
                continue
            adv, old, ref, behaviour = per_mb[k]
            mask = mb.resp_mask.to(logp.device)
            inp = ObjectiveInput(
                logp,
                mask,
                adv,
                old,
                ref,
                None if mb.pairs is None else mb.pairs.to(logp.device),
                behaviour_logp=behaviour,
                **totals,
            )
            loss, m = obj.fn(inp, cfg)
            for j, key in enumerate(keys):  # "max" metrics: the largest (over this rank's micro-batches)
                sums[j] = max(sums[j], m.get(key, 0.0)) if obj.metrics[key] == "max" else sums[j] + m.get(key, 0.0)
            assert ent is not None  # asked for (want_entropy)
            sums[-2] += float(ent.sum())
            finite = bool(torch.isfinite(loss))
            if not finite:
                sums[-1] += 1
            self._backward(loss, finite)
        self._all_reduce(sums)
        lr = cfg.actor_learning_rate * lr_multiplier(self.updates, cfg) * self.lr_scale
        applied, grad_norm = self._apply_update(lr, finite=sums[-1].item() == 0)
        s = sums.tolist()
        div = {"tokens": max(totals["num_tokens"], 1.0), "pairs": max(totals["num_pairs"], 1.0), "sum": 1.0, "max": 1.0}
        out = {key: s[j] / div[obj.metrics[key]] for j, key in enumerate(keys)}
        out.update(
            {
                "actor/entropy": s[-2] / max(totals["num_tokens"], 1.0),
                "actor/grad_norm": grad_norm,
                "actor/lr": lr if applied else 0.0,
                "actor/skipped": 0.0 if applied else 1.0,
            }
        )
        return out

    def sync_ref(self) -> None:
        """Copy the policy's current weights into the reference model (recipes that refresh it)."""
        raise NotImplementedError
