"""The plain-torch learner: one process, one policy (and a reference model only if needed).

Design points:

- Sequences are sorted by length and cut into micro-batches of ``micro_batch_size``, so
  a micro-batch pads only up to its own longest sequence, and the LM head runs only on
  the positions that predict response tokens (not on prompts or padding).
- Each PPO epoch is one optimizer step over the whole batch (gradient accumulation over
  the micro-batches); the loss of the step is normalised over the whole batch, so the
  micro-batching does not change it.
- A non-finite loss or gradient norm skips the update: gradients are dropped, the
  optimizer and the LR schedule do not move, ``actor/skipped`` is 1.0, and the next
  call trains normally.
- ``named_weights`` yields the live parameters under their Hugging Face names; a tied
  LM head appears once, as ``model.embed_tokens.weight``, which is what
  ``from_pretrained`` and vLLM expect for ``tie_word_embeddings`` models.
- ``save`` writes the policy in HF layout (fp32 safetensors, config, tokenizer) and the
  optimizer, schedule and RNG state to ``learner_state.pt``; ``load`` restores all of
  them, so a resumed run continues bit-for-bit.
"""
from __future__ import annotations

import logging
import math
import os
import shutil
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import torch
from torch import Tensor

from serl.algos import aggregate, kl_estimate, ppo_clip_loss
from serl.algos.kl import canonical_kl
from serl.algos.losses import LOSS_AGGREGATIONS
from serl.engines.base import TrainBatch

log = logging.getLogger(__name__)

STATE_FILE = "learner_state.pt"


@dataclass
class LearnerConfig:
    """Optimisation settings of the torch learner (defaults follow SeRL's scripts)."""

    lr: float = 5e-7  # peak learning rate of AdamW
    weight_decay: float = 0.0  # AdamW decoupled weight decay, on matrices only (not norms)
    adam_betas: tuple[float, float] = (0.9, 0.95)  # AdamW betas (OpenRLHF's default)
    warmup_ratio: float = 0.03  # fraction of total_steps with linear warm-up
    min_lr_ratio: float = 0.1  # the cosine decays to lr * min_lr_ratio
    total_steps: int = 100  # optimizer steps the schedule spans (after it: min LR)
    micro_batch_size: int = 4  # sequences per forward/backward pass
    max_grad_norm: float = 1.0  # clip the global gradient norm to this (<= 0: no clipping)
    bf16: bool = False  # bf16 autocast for forward/backward; weights and Adam stay fp32
    grad_checkpointing: bool = False  # recompute activations in backward to save memory
    eps_clip_low: float = 0.2  # PPO clip range below 1
    eps_clip_high: float = 0.2  # PPO clip range above 1 (DAPO "clip-higher" when larger)
    loss_agg: str = "token_mean"  # "token_mean" over the step or per-sequence "seq_mean"
    use_kl_loss: bool = False  # add kl_loss_coef * KL(policy, ref) to the loss (GRPO style)
    kl_loss_coef: float = 0.0  # weight of the KL loss term
    kl_estimator: str = "k3"  # k1 | k2 | k3, for the KL loss term
    temperature: float = 1.0  # logits are divided by this (match the sampling temperature)
    ppo_epochs: int = 1  # optimizer steps per ``step`` call, each over the whole batch
    seed: int = 0  # torch seed set at construction

    def __post_init__(self) -> None:
        if self.loss_agg not in LOSS_AGGREGATIONS:
            raise ValueError(f"LearnerConfig.loss_agg: {self.loss_agg!r} is not one of "
                             f"{LOSS_AGGREGATIONS}")
        canonical_kl(self.kl_estimator)
        for name in ("micro_batch_size", "total_steps", "ppo_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"LearnerConfig.{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.warmup_ratio <= 1.0 or not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError("LearnerConfig.warmup_ratio and min_lr_ratio must lie in [0, 1]")
        if self.temperature <= 0:
            raise ValueError(f"LearnerConfig.temperature must be > 0, got {self.temperature}")


def lr_multiplier(update: int, cfg: LearnerConfig) -> float:
    """LR factor for the ``update``-th optimizer step (0-based): warm-up, then cosine to min.

    Unlike Hugging Face's schedule, whose first update runs at LR 0, warm-up here uses
    (update+1)/warmup so no step is wasted.
    """
    warm = math.ceil(cfg.warmup_ratio * cfg.total_steps)
    if update < warm:
        return (update + 1) / warm
    progress = min(1.0, (update - warm) / max(1, cfg.total_steps - warm))
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


@dataclass
class _Micro:
    """One padded micro-batch: sequence indices, inputs and response layout."""

    index: list[int]
    input_ids: Tensor         # [b, L]
    attention_mask: Tensor    # [b, L]
    resp_mask: Tensor         # [b, R] bool, True on response tokens
    pred_rows: Tensor         # [N] row of each response token's predicting position
    pred_cols: Tensor         # [N] column of that position (one before the token)
    targets: Tensor           # [N] the response token ids, row-major
    lengths: list[int] = field(default_factory=list)  # response lengths


def _micro_batches(prompt_ids: list[list[int]], response_ids: list[list[int]], size: int,
                   pad_id: int) -> list[_Micro]:
    if len(prompt_ids) != len(response_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(response_ids)} responses")
    for i, (p, r) in enumerate(zip(prompt_ids, response_ids)):
        if not p:
            raise ValueError(f"sequence {i}: empty prompt (the first response token "
                             "needs a position to be predicted from)")
    order = sorted(range(len(prompt_ids)), key=lambda i: -(len(prompt_ids[i]) + len(response_ids[i])))
    out = []
    for s in range(0, len(order), size):
        idx = order[s:s + size]
        lens = [len(prompt_ids[i]) + len(response_ids[i]) for i in idx]
        rl = [len(response_ids[i]) for i in idx]
        L, R = max(lens), max(rl) if rl else 0
        ids = torch.full((len(idx), L), pad_id, dtype=torch.long)
        att = torch.zeros((len(idx), L), dtype=torch.long)
        resp = torch.zeros((len(idx), max(R, 1)), dtype=torch.bool)
        rows, cols, tgts = [], [], []
        for b, i in enumerate(idx):
            seq = list(prompt_ids[i]) + list(response_ids[i])
            ids[b, :len(seq)] = torch.tensor(seq, dtype=torch.long)
            att[b, :len(seq)] = 1
            p, r = len(prompt_ids[i]), len(response_ids[i])
            resp[b, :r] = True
            rows.extend([b] * r)
            cols.extend(range(p - 1, p + r - 1))
            tgts.extend(response_ids[i])
        out.append(_Micro(idx, ids, att, resp, torch.tensor(rows, dtype=torch.long),
                          torch.tensor(cols, dtype=torch.long),
                          torch.tensor(tgts, dtype=torch.long), rl))
    return out


def _pad(values: list[Tensor], idx: list[int], like: Tensor, what: str, lengths: list[int]) -> Tensor:
    out = torch.zeros(like.shape, dtype=torch.float32)
    for b, i in enumerate(idx):
        v = torch.as_tensor(values[i], dtype=torch.float32).reshape(-1)
        if v.numel() != lengths[b]:
            raise ValueError(f"TrainBatch.{what}[{i}] has {v.numel()} entries, "
                             f"response has {lengths[b]} tokens")
        out[b, :v.numel()] = v
    return out


class TorchLearner:
    """Learner protocol on plain torch; see the module docstring."""

    def __init__(self, model_path: str, cfg: LearnerConfig, need_ref: bool, tokenizer=None):
        from serl.models import load_causal_lm

        self.cfg = cfg
        self.model_path = model_path
        self.tokenizer = tokenizer
        torch.manual_seed(cfg.seed)
        self.policy = load_causal_lm(model_path, dtype=torch.float32)
        self.policy.train()
        if cfg.grad_checkpointing:
            self.policy.config.use_cache = False
            self.policy.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
        self.ref = None
        if need_ref or cfg.use_kl_loss:
            self.ref = load_causal_lm(model_path, dtype=torch.float32).eval()
            self.ref.requires_grad_(False)
        pad = getattr(self.policy.config, "pad_token_id", None)
        self.pad_id = int(pad) if isinstance(pad, int) else 0
        decay = [p for p in self.policy.parameters() if p.requires_grad and p.dim() >= 2]
        no_decay = [p for p in self.policy.parameters() if p.requires_grad and p.dim() < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=cfg.lr * lr_multiplier(0, cfg), betas=tuple(cfg.adam_betas), fused=True)
        self.updates = 0          # optimizer steps taken (the schedule's position)
        self.skipped_total = 0    # updates skipped for non-finite loss/gradients

    # ----------------------------------------------------------------- forward
    def _autocast(self):
        return torch.autocast("cpu", dtype=torch.bfloat16) if self.cfg.bf16 else nullcontext()

    def _token_logprobs(self, model, mb: _Micro, want_entropy: bool = False
                        ) -> tuple[Tensor, Tensor | None]:
        """Flat [N] log-probs of the response tokens (and their entropies)."""
        with self._autocast():
            if getattr(model.config, "final_logit_softcapping", None) or \
                    getattr(model.config, "logit_scale", None):
                # models that transform logits after the head: take them whole
                logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask,
                               use_cache=False).logits[mb.pred_rows, mb.pred_cols]
            else:
                base = getattr(model, model.base_model_prefix)
                hidden = base(input_ids=mb.input_ids, attention_mask=mb.attention_mask,
                              use_cache=False).last_hidden_state
                logits = model.get_output_embeddings()(hidden[mb.pred_rows, mb.pred_cols])
        logits = logits.float()
        if self.cfg.temperature != 1.0:
            logits = logits / self.cfg.temperature
        lse = torch.logsumexp(logits, dim=-1)
        logp = logits.gather(-1, mb.targets[:, None]).squeeze(-1) - lse
        ent = None
        if want_entropy:
            with torch.no_grad():
                ent = lse - (torch.softmax(logits, -1) * logits).sum(-1)
        return logp, ent

    def _to_rows(self, flat: Tensor, mb: _Micro) -> Tensor:
        out = flat.new_zeros(mb.resp_mask.shape)
        out[mb.resp_mask] = flat  # row-major order matches pred_rows/pred_cols
        return out

    @torch.no_grad()
    def logprobs(self, prompt_ids: list[list[int]], response_ids: list[list[int]],
                 model: str = "policy") -> list[Tensor]:
        """Log-probs of each response token under "policy" or "ref" (1-D fp32 each)."""
        if model == "policy":
            net = self.policy
        elif model == "ref":
            if self.ref is None:
                raise ValueError("no reference model loaded (need_ref=False and use_kl_loss off)")
            net = self.ref
        else:
            raise ValueError(f"model must be 'policy' or 'ref', got {model!r}")
        out: list[Tensor | None] = [None] * len(prompt_ids)
        for mb in _micro_batches(prompt_ids, response_ids, self.cfg.micro_batch_size, self.pad_id):
            rows = self._to_rows(self._token_logprobs(net, mb)[0], mb)
            for b, i in enumerate(mb.index):
                out[i] = rows[b, :mb.lengths[b]].clone()
        return out  # type: ignore[return-value]

    # -------------------------------------------------------------------- step
    def step(self, batch: TrainBatch) -> dict[str, float]:
        """``ppo_epochs`` optimizer steps over the batch; metrics averaged over them."""
        cfg = self.cfg
        if not batch.response_ids or not any(batch.response_ids):
            raise ValueError("TrainBatch has no response tokens to train on")
        mbs = _micro_batches(batch.prompt_ids, batch.response_ids, cfg.micro_batch_size, self.pad_id)
        ref_lp = batch.ref_logprobs
        if cfg.use_kl_loss and ref_lp is None:
            ref_lp = self.logprobs(batch.prompt_ids, batch.response_ids, model="ref")
        old_lp = batch.old_logprobs
        if old_lp is None and cfg.ppo_epochs > 1:  # later epochs need the pre-update values
            old_lp = self.logprobs(batch.prompt_ids, batch.response_ids, model="policy")
        per_mb = []
        for mb in mbs:
            per_mb.append((_pad(batch.advantages, mb.index, mb.resp_mask, "advantages", mb.lengths),
                           _pad(old_lp, mb.index, mb.resp_mask, "old_logprobs", mb.lengths)
                           if old_lp is not None else None,
                           _pad(ref_lp, mb.index, mb.resp_mask, "ref_logprobs", mb.lengths)
                           if cfg.use_kl_loss else None))
        n_tok = float(sum(sum(mb.lengths) for mb in mbs))
        n_seq = float(len(batch.response_ids))
        runs = [self._one_update(mbs, per_mb, n_tok, n_seq) for _ in range(cfg.ppo_epochs)]
        metrics = {k: sum(r[k] for r in runs) / len(runs) for k in runs[0]}
        metrics["actor/skipped"] = max(r["actor/skipped"] for r in runs)
        metrics["actor/skipped_total"] = float(self.skipped_total)
        metrics["actor/updates"] = float(self.updates)
        metrics["actor/tokens"] = n_tok
        return metrics

    def _one_update(self, mbs: list[_Micro], per_mb, n_tok: float, n_seq: float) -> dict[str, float]:
        cfg = self.cfg
        self.optimizer.zero_grad(set_to_none=True)
        sums = dict.fromkeys(("policy", "kl", "entropy", "clip_frac", "approx_kl", "ratio"), 0.0)
        finite = True
        for mb, (adv, old, ref) in zip(mbs, per_mb):
            flat, ent = self._token_logprobs(self.policy, mb, want_entropy=True)
            logp = self._to_rows(flat, mb)
            mask = mb.resp_mask
            if old is None:  # on-policy: the ratio is exactly 1, its gradient that of logp
                old = logp.detach()
            loss, m = ppo_clip_loss(logp, old, adv, mask, cfg.eps_clip_low, cfg.eps_clip_high,
                                    cfg.loss_agg, num_tokens=n_tok, num_seqs=n_seq)
            sums["policy"] += loss.item()
            if cfg.use_kl_loss:
                kl = kl_estimate(logp, ref, cfg.kl_estimator)
                kl_term = aggregate(kl, mask, cfg.loss_agg, n_tok, n_seq)
                sums["kl"] += kl_term.item()
                loss = loss + cfg.kl_loss_coef * kl_term
            w = float(mask.sum())
            sums["entropy"] += float(ent.sum())
            for k in ("clip_frac", "approx_kl", "ratio"):
                sums[k] += m[k] * w
            if not torch.isfinite(loss):
                finite = False
                break  # the update is lost anyway: do not spend time on the rest
            loss.backward()
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        if finite:
            max_norm = cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
            finite = math.isfinite(grad_norm)
        else:
            grad_norm = float("nan")
        lr = cfg.lr * lr_multiplier(self.updates, cfg)
        if finite:
            for g in self.optimizer.param_groups:
                g["lr"] = lr
            self.optimizer.step()
            self.updates += 1
        else:
            self.skipped_total += 1
            log.warning("non-finite loss or gradient: update %d skipped", self.updates)
        self.optimizer.zero_grad(set_to_none=True)
        return {
            "loss/policy": sums["policy"], "loss/kl": sums["kl"],
            "actor/entropy": sums["entropy"] / max(n_tok, 1.0),
            "actor/clip_frac": sums["clip_frac"] / max(n_tok, 1.0),
            "actor/approx_kl": sums["approx_kl"] / max(n_tok, 1.0),
            "actor/ratio": sums["ratio"] / max(n_tok, 1.0),
            "actor/grad_norm": grad_norm, "actor/lr": lr if finite else 0.0,
            "actor/skipped": 0.0 if finite else 1.0,
        }

    # ----------------------------------------------------------- weights, I/O
    def named_weights(self) -> Iterator[tuple[str, Tensor]]:
        """The live policy parameters under HF names (no copies; tied head listed once)."""
        for name, p in self.policy.named_parameters():
            yield name, p.detach()

    def _tokenizer_for_save(self):
        if self.tokenizer is not None:
            return self.tokenizer
        try:
            from transformers import AutoTokenizer
            return AutoTokenizer.from_pretrained(self.model_path)
        except Exception as e:  # a model dir without tokenizer files is still valid
            log.info("no tokenizer saved with the policy: %s", e)
            return None

    def save(self, path: str) -> None:
        """Policy in HF layout + ``learner_state.pt``; written to a temp dir, then moved."""
        dest = Path(path)
        tmp = dest.with_name(dest.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.policy.save_pretrained(str(tmp))
        tok = self._tokenizer_for_save()
        if tok is not None:
            tok.save_pretrained(str(tmp))
        torch.save({
            "optimizer": self.optimizer.state_dict(),
            "updates": self.updates,
            "skipped_total": self.skipped_total,
            "rng": torch.get_rng_state(),
            "config": asdict(self.cfg),
        }, tmp / STATE_FILE)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)

    def load(self, path: str) -> None:
        """Restore the weights, optimizer moments, schedule position and RNG from ``save``."""
        from safetensors.torch import load_file

        src = Path(path)
        files = sorted(src.glob("*.safetensors"))
        state_file = src / STATE_FILE
        if not files or not state_file.exists():
            raise FileNotFoundError(f"{path}: not a learner checkpoint (needs *.safetensors "
                                    f"and {STATE_FILE})")
        sd: dict[str, Tensor] = {}
        for f in files:
            sd.update(load_file(str(f)))
        own = dict(self.policy.named_parameters())
        missing = sorted(set(own) - set(sd))
        unexpected = sorted(set(sd) - set(self.policy.state_dict()))
        if missing or unexpected:
            raise ValueError(f"{path}: weights do not match the model: missing {missing[:5]}, "
                             f"unexpected {unexpected[:5]}")
        with torch.no_grad():
            for name, p in own.items():
                p.copy_(sd[name])
        state = torch.load(state_file, map_location="cpu", weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
        self.skipped_total = int(state["skipped_total"])
        torch.set_rng_state(state["rng"])


def updates_per_step(cfg) -> int:
    """Optimizer steps per training step: the rollout's sequences over ``train_batch_size``."""
    seqs = cfg.rollout_batch_size * cfg.n_samples_per_prompt
    size = cfg.train_batch_size
    return 1 if not size or size >= seqs else math.ceil(seqs / size)


def learner_config(cfg) -> LearnerConfig:
    """The learner's settings from a ``TrainConfig`` (shared by every learner kind)."""
    return LearnerConfig(
        lr=cfg.actor_learning_rate, warmup_ratio=cfg.lr_warmup_ratio, min_lr_ratio=cfg.min_lr_ratio,
        total_steps=cfg.steps * updates_per_step(cfg), micro_batch_size=cfg.micro_train_batch_size,
        max_grad_norm=cfg.max_norm, bf16=cfg.bf16, grad_checkpointing=cfg.gradient_checkpointing,
        eps_clip_low=cfg.eps_clip, eps_clip_high=cfg.eps_clip, use_kl_loss=cfg.use_kl_loss,
        kl_loss_coef=cfg.init_kl_coef if cfg.use_kl_loss else 0.0, kl_estimator=cfg.kl_estimator,
        seed=cfg.seed)
