"""The DeepSpeed learner: the Learner protocol on ZeRO stage 0-3, one rank per process.

Same interface, loss and metric keys as ``TorchLearner``; what differs:

- Data parallel inside the learner: every rank is handed the *whole* batch and trains on
  its own shard (sequence ``i`` goes to rank ``i % world``). The loss is normalised over
  the whole batch's tokens and multiplied by the world size, because DeepSpeed averages
  gradients over ranks; so the update equals the single-process one.
- Every rank runs the same number of forward/backward passes (a rank short of work runs
  a one-token dummy micro-batch with zero weight): under ZeRO-3 each pass gathers
  parameters collectively, and ranks that skip one would hang the others.
- Gradient accumulation is unmanaged (``managed_gradient_accumulation: false``): a step
  takes as many micro-batches as the batch has, and ``engine.step()`` is the boundary.
- A non-finite loss or gradient norm skips the update on all ranks: DeepSpeed's ZeRO
  optimizers (stages 1-3; bf16 too, ``check_grad_overflow``) check the global norm and
  drop the gradients; the schedule does not move. Stage 0 has no such check, so it is
  not offered.
- ``named_weights`` gathers one parameter at a time under ZeRO-3 and yields a copy of it
  (the gathered storage is released when the next one is gathered). It is collective:
  every rank must iterate it to the end together.
- ``save`` writes the HF-format policy (gathered, fp32 or bf16 as trained) plus
  DeepSpeed's own checkpoint under ``deepspeed/`` (sharded optimizer state, per-rank RNG
  and counters); ``load`` restores all of it. The directory must be on storage every
  rank sees.
"""
from __future__ import annotations

import logging
import os
import shutil
import socket
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

import torch
import torch.distributed as dist
from torch import Tensor

from serl.algos import aggregate, kl_estimate, ppo_clip_loss
from serl.engines.base import TrainBatch
from serl.engines.torch_learner import LearnerConfig, _micro_batches, _Micro, _pad, lr_multiplier

log = logging.getLogger(__name__)

DS_DIR = "deepspeed"
TAG = "state"
_SUMS = ("policy", "kl", "entropy", "clip_frac", "approx_kl", "ratio")


@dataclass
class DeepSpeedOptions:
    """How the policy is sharded and where its optimizer lives."""

    zero_stage: int = 2  # 1-3: 1 shards Adam states, 2 also gradients, 3 also parameters
    adam_offload: bool = False  # Adam states on the CPU (DeepSpeed's CPU Adam; compiles once)
    param_offload: bool = False  # ZeRO-3 only: parameters on the CPU between uses
    backend: str = ""  # process-group backend when the learner starts it ("" = gloo on CPU, else nccl)

    def __post_init__(self) -> None:
        if self.zero_stage not in (1, 2, 3):
            raise ValueError(f"DeepSpeedOptions.zero_stage must be 1, 2 or 3, got {self.zero_stage}")
        if self.param_offload and self.zero_stage != 3:
            raise ValueError("DeepSpeedOptions.param_offload needs zero_stage 3")


def deepspeed_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("deepspeed") is not None


def ds_config(cfg: LearnerConfig, opts: DeepSpeedOptions, train: bool = True) -> dict:
    """The DeepSpeed JSON config for the policy (``train``) or the frozen reference."""
    zero: dict = {"stage": opts.zero_stage, "overlap_comm": False}
    if opts.zero_stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
        if opts.param_offload:
            zero["offload_param"] = {"device": "cpu", "pin_memory": torch.cuda.is_available()}
    if train and opts.adam_offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": torch.cuda.is_available()}
    conf = {
        "train_micro_batch_size_per_gpu": cfg.micro_batch_size,
        "gradient_accumulation_steps": 1,
        "bf16": {"enabled": cfg.bf16},
        "zero_optimization": zero,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if train:
        conf["managed_gradient_accumulation"] = False
        conf["gradient_clipping"] = cfg.max_grad_norm if cfg.max_grad_norm > 0 else 0.0
        if opts.adam_offload:  # DeepSpeed builds its CPU Adam from this
            conf["optimizer"] = {"type": "AdamW", "params": {
                "lr": cfg.lr, "betas": list(cfg.adam_betas), "weight_decay": cfg.weight_decay}}
    return conf


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_process_group(backend: str = "") -> None:
    """Join (or, alone, start) the default process group; torchrun/Ray set the env vars."""
    if dist.is_initialized():
        return
    for k, v in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"),
                 ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(k, v)
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed

    deepspeed.init_distributed(dist_backend=backend or ("nccl" if torch.cuda.is_available() else "gloo"),
                               auto_mpi_discovery=False)


class _Scorer(torch.nn.Module):
    """Wraps the causal LM so DeepSpeed's engine is the root of every forward: returns
    the logits of the positions that predict response tokens only."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: Tensor, attention_mask: Tensor, rows: Tensor, cols: Tensor) -> Tensor:
        lm = self.lm
        if getattr(lm.config, "final_logit_softcapping", None) or getattr(lm.config, "logit_scale", None):
            return lm(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits[rows, cols]
        base = getattr(lm, lm.base_model_prefix)
        hidden = base(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        return lm.get_output_embeddings()(hidden[rows, cols])


def _dummy(pad_id: int) -> _Micro:
    """A one-token prompt and one-token response: keeps a short rank in step with the others."""
    return _micro_batches([[pad_id]], [[pad_id]], 1, pad_id)[0]


class DeepSpeedLearner:
    """Learner protocol on DeepSpeed ZeRO; see the module docstring."""

    def __init__(self, model_path: str, cfg: LearnerConfig, need_ref: bool, tokenizer=None,
                 opts: DeepSpeedOptions | None = None):
        if not torch.cuda.is_available():  # before deepspeed is imported: it picks its accelerator then
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        import deepspeed
        from transformers.integrations import HfDeepSpeedConfig

        from serl.models import load_causal_lm

        self.cfg, self.opts = cfg, opts or DeepSpeedOptions()
        self.model_path, self.tokenizer = model_path, tokenizer
        init_process_group(self.opts.backend)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        torch.manual_seed(cfg.seed)
        dtype = torch.bfloat16 if cfg.bf16 else torch.float32
        conf = ds_config(cfg, self.opts, train=True)
        # Under ZeRO-3 this makes from_pretrained partition the weights while loading,
        # so no rank ever holds the whole model; it must stay alive while models load.
        hf_ds = HfDeepSpeedConfig(conf) if self.opts.zero_stage == 3 else None
        lm = load_causal_lm(model_path, dtype=dtype)
        lm.train()
        if cfg.grad_checkpointing:
            lm.config.use_cache = False
            lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        pad = getattr(lm.config, "pad_token_id", None)
        self.pad_id = int(pad) if isinstance(pad, int) else 0
        self.lm = lm
        optimizer = None
        if not self.opts.adam_offload:
            shape = lambda p: getattr(p, "ds_shape", p.shape)  # noqa: E731  (ZeRO-3 flattens p)
            params = [p for p in lm.parameters() if p.requires_grad]
            optimizer = torch.optim.AdamW(
                [{"params": [p for p in params if len(shape(p)) >= 2], "weight_decay": cfg.weight_decay},
                 {"params": [p for p in params if len(shape(p)) < 2], "weight_decay": 0.0}],
                lr=cfg.lr * lr_multiplier(0, cfg), betas=tuple(cfg.adam_betas))
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=_Scorer(lm), optimizer=optimizer, config=conf,
            model_parameters=None if optimizer else [p for p in lm.parameters() if p.requires_grad])
        self.ref = None
        if need_ref:  # with the KL loss and no reference here, batches must bring ref_logprobs
            ref = load_causal_lm(model_path, dtype=dtype).eval()
            ref.requires_grad_(False)
            if self.opts.zero_stage == 3:
                self.ref, *_ = deepspeed.initialize(model=_Scorer(ref), config=ds_config(cfg, self.opts, False))
            else:
                self.ref = _Scorer(ref)
        del hf_ds
        self.updates = 0
        self.skipped_total = 0

    # ----------------------------------------------------------------- helpers
    def _shard(self, n: int) -> list[int]:
        return list(range(self.rank, n, self.world))

    def _all_max(self, x: int) -> int:
        t = torch.tensor([x], dtype=torch.long)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def _micro(self, prompt_ids, response_ids, shard):
        """This rank's micro-batches (sequence indices are global) plus dummies to even out."""
        mbs = _micro_batches([prompt_ids[i] for i in shard], [response_ids[i] for i in shard],
                             self.cfg.micro_batch_size, self.pad_id) if shard else []
        for mb in mbs:
            mb.index = [shard[i] for i in mb.index]
        real = len(mbs)
        mbs += [_dummy(self.pad_id)] * (self._all_max(real) - real)
        return mbs, real

    def _token_logprobs(self, net, mb: _Micro, want_entropy: bool = False):
        # weights are bf16 themselves under --bf16 (DeepSpeed keeps fp32 masters in the optimizer)
        logits = net(mb.input_ids, mb.attention_mask, mb.pred_rows, mb.pred_cols).float()
        if self.cfg.temperature != 1.0:
            logits = logits / self.cfg.temperature
        lse = torch.logsumexp(logits, dim=-1)
        logp = logits.gather(-1, mb.targets[:, None]).squeeze(-1) - lse
        ent = None
        if want_entropy:
            with torch.no_grad():
                ent = lse - (torch.softmax(logits, -1) * logits).sum(-1)
        return logp, ent

    @staticmethod
    def _to_rows(flat: Tensor, mb: _Micro) -> Tensor:
        out = flat.new_zeros(mb.resp_mask.shape)
        out[mb.resp_mask] = flat
        return out

    # ----------------------------------------------------------------- protocol
    @torch.no_grad()
    def logprobs(self, prompt_ids: list[list[int]], response_ids: list[list[int]],
                 model: str = "policy") -> list[Tensor]:
        """Log-probs of each response token; collective: every rank gets the full list."""
        if model == "policy":
            net = self.engine
        elif model == "ref":
            if self.ref is None:
                raise ValueError("no reference model loaded (need_ref=False and use_kl_loss off)")
            net = self.ref
        else:
            raise ValueError(f"model must be 'policy' or 'ref', got {model!r}")
        if len(prompt_ids) != len(response_ids):
            raise ValueError(f"{len(prompt_ids)} prompts but {len(response_ids)} responses")
        mbs, real = self._micro(prompt_ids, response_ids, self._shard(len(prompt_ids)))
        mine: dict[int, Tensor] = {}
        for k, mb in enumerate(mbs):
            rows = self._to_rows(self._token_logprobs(net, mb)[0], mb)
            if k < real:
                for b, i in enumerate(mb.index):
                    mine[i] = rows[b, :mb.lengths[b]].clone()
        if self.world == 1:
            return [mine[i] for i in range(len(prompt_ids))]
        parts: list = [None] * self.world
        dist.all_gather_object(parts, mine)
        merged = {i: t for part in parts for i, t in part.items()}
        return [merged[i] for i in range(len(prompt_ids))]

    def step(self, batch: TrainBatch) -> dict[str, float]:
        """``ppo_epochs`` updates over the batch (each rank on its shard); global metrics."""
        cfg = self.cfg
        if not batch.response_ids or not any(batch.response_ids):
            raise ValueError("TrainBatch has no response tokens to train on")
        ref_lp = batch.ref_logprobs
        if cfg.use_kl_loss and ref_lp is None:
            if self.ref is None:
                raise ValueError("use_kl_loss: the batch has no ref_logprobs and this learner "
                                 "has no reference model (need_ref=False)")
            ref_lp = self.logprobs(batch.prompt_ids, batch.response_ids, model="ref")
        old_lp = batch.old_logprobs
        if old_lp is None and cfg.ppo_epochs > 1:  # later epochs need the pre-update values
            old_lp = self.logprobs(batch.prompt_ids, batch.response_ids, model="policy")
        mbs, real = self._micro(batch.prompt_ids, batch.response_ids, self._shard(len(batch.prompt_ids)))
        per_mb = []
        for mb in mbs[:real]:
            per_mb.append((_pad(batch.advantages, mb.index, mb.resp_mask, "advantages", mb.lengths),
                           _pad(old_lp, mb.index, mb.resp_mask, "old_logprobs", mb.lengths)
                           if old_lp is not None else None,
                           _pad(ref_lp, mb.index, mb.resp_mask, "ref_logprobs", mb.lengths)
                           if cfg.use_kl_loss else None))
        n_tok = float(sum(len(r) for r in batch.response_ids))
        n_seq = float(len(batch.response_ids))
        runs = [self._one_update(mbs, real, per_mb, n_tok, n_seq) for _ in range(cfg.ppo_epochs)]
        metrics = {k: sum(r[k] for r in runs) / len(runs) for k in runs[0]}
        metrics["actor/skipped"] = max(r["actor/skipped"] for r in runs)
        metrics["actor/skipped_total"] = float(self.skipped_total)
        metrics["actor/updates"] = float(self.updates)
        metrics["actor/tokens"] = n_tok
        return metrics

    def _one_update(self, mbs, real, per_mb, n_tok: float, n_seq: float) -> dict[str, float]:
        cfg = self.cfg
        sums = torch.zeros(len(_SUMS) + 1, dtype=torch.float64)  # + 1: count of non-finite losses
        for k, mb in enumerate(mbs):
            flat, ent = self._token_logprobs(self.engine, mb, want_entropy=True)
            logp = self._to_rows(flat, mb)
            if k >= real:  # a dummy pass: zero weight, but the same collectives as the others
                self.engine.backward(logp.sum() * 0.0, scale_wrt_gas=False)
                continue
            adv, old, ref = per_mb[k]
            mask = mb.resp_mask
            if old is None:  # on-policy: the ratio is exactly 1, its gradient that of logp
                old = logp.detach()
            loss, m = ppo_clip_loss(logp, old, adv, mask, cfg.eps_clip_low, cfg.eps_clip_high,
                                    cfg.loss_agg, num_tokens=n_tok, num_seqs=n_seq)
            sums[0] += loss.item()
            if cfg.use_kl_loss:
                kl_term = aggregate(kl_estimate(logp, ref, cfg.kl_estimator), mask, cfg.loss_agg, n_tok, n_seq)
                sums[1] += kl_term.item()
                loss = loss + cfg.kl_loss_coef * kl_term
            w = float(mask.sum())
            sums[2] += float(ent.sum())
            sums[3] += m["clip_frac"] * w
            sums[4] += m["approx_kl"] * w
            sums[5] += m["ratio"] * w
            if not torch.isfinite(loss):
                sums[6] += 1
            # DeepSpeed averages gradients over ranks; the loss is already a share of the
            # whole batch, so scale it back up to get the sum.
            self.engine.backward(loss * self.world, scale_wrt_gas=False)
        if self.world > 1:
            dist.all_reduce(sums)
        # DeepSpeed's ZeRO optimizers check the global gradient norm and, when it is not
        # finite, drop the gradients and skip the update on every rank; we only read it back.
        lr = cfg.lr * lr_multiplier(self.updates, cfg)
        for g in self.engine.optimizer.param_groups:
            g["lr"] = lr
        self.engine.step()
        finite = self.engine.was_step_applied() and sums[6].item() == 0
        if finite:
            gn = self.engine.get_global_grad_norm()
            grad_norm = float(gn) if gn is not None else float("nan")
            self.updates += 1
        else:
            grad_norm = float("nan")
            self.skipped_total += 1
            log.warning("non-finite loss or gradient: update %d skipped on all ranks", self.updates)
        self.engine.zero_grad()
        s = sums.tolist()
        return {
            "loss/policy": s[0], "loss/kl": s[1],
            "actor/entropy": s[2] / max(n_tok, 1.0),
            "actor/clip_frac": s[3] / max(n_tok, 1.0),
            "actor/approx_kl": s[4] / max(n_tok, 1.0),
            "actor/ratio": s[5] / max(n_tok, 1.0),
            "actor/grad_norm": grad_norm, "actor/lr": lr if finite else 0.0,
            "actor/skipped": 0.0 if finite else 1.0,
        }

    # ----------------------------------------------------------- weights, I/O
    @contextmanager
    def _gathered(self, p):
        if self.opts.zero_stage == 3 and hasattr(p, "ds_id"):
            import deepspeed

            with deepspeed.zero.GatheredParameters([p], modifier_rank=None):
                yield p
        else:
            yield p

    def named_weights(self) -> Iterator[tuple[str, Tensor]]:
        """Policy weights under HF names, one parameter gathered at a time (collective).

        ZeRO-3 yields a copy (the gathered storage goes away on the next parameter);
        other stages yield the live parameter, as the torch learner does.
        """
        for name, p in self.lm.named_parameters():
            with self._gathered(p):
                t = p.detach()
                yield name, (t.clone() if self.opts.zero_stage == 3 else t)

    def _tokenizer_for_save(self):
        if self.tokenizer is not None:
            return self.tokenizer
        try:
            from transformers import AutoTokenizer
            return AutoTokenizer.from_pretrained(self.model_path)
        except Exception as e:  # a model dir without tokenizer files is still valid
            log.info("no tokenizer saved with the policy: %s", e)
            return None

    def export_hf(self, path: str) -> None:
        """Write the policy in HF layout on rank 0 (collective: gathers on every rank)."""
        sd = {}
        for name, t in self.named_weights():
            if self.rank == 0:
                sd[name] = t.detach().to("cpu", copy=True)
        if self.rank == 0:
            self.lm.save_pretrained(path, state_dict=sd)
            tok = self._tokenizer_for_save()
            if tok is not None:
                tok.save_pretrained(path)

    def save(self, path: str) -> None:
        """HF policy + DeepSpeed checkpoint; written to ``path.tmp`` then moved (collective)."""
        dest = Path(path)
        tmp = dest.with_name(dest.name + ".tmp")
        if self.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        dist.barrier()
        self.export_hf(str(tmp))
        state = {"updates": self.updates, "skipped_total": self.skipped_total,
                 "config": asdict(self.cfg), "options": asdict(self.opts)}
        self.engine.save_checkpoint(str(tmp / DS_DIR), tag=TAG, client_state=state)
        torch.save(torch.get_rng_state(), tmp / DS_DIR / f"rng_rank{self.rank}.pt")
        dist.barrier()
        if self.rank == 0:
            if dest.exists():
                shutil.rmtree(dest)
            os.replace(tmp, dest)
        dist.barrier()

    def load(self, path: str) -> None:
        """Restore weights, optimizer shards, schedule position and RNG from ``save``."""
        ckpt = Path(path) / DS_DIR
        if not (ckpt / TAG).is_dir():
            raise FileNotFoundError(f"{path}: not a DeepSpeed learner checkpoint (no {DS_DIR}/{TAG}/)")
        load_path, state = self.engine.load_checkpoint(str(ckpt), tag=TAG, load_optimizer_states=True,
                                                       load_lr_scheduler_states=False)
        if load_path is None:
            raise FileNotFoundError(f"{path}: DeepSpeed could not load {ckpt}/{TAG}")
        self.updates = int(state["updates"])
        self.skipped_total = int(state["skipped_total"])
        rng = ckpt / f"rng_rank{self.rank}.pt"
        if rng.exists():  # absent when the world size changed: keep the current RNG
            torch.set_rng_state(torch.load(rng, weights_only=False))

    def close(self) -> None:
        """Leave the process group (a rank that exits without it may abort)."""
        if dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()


def make_deepspeed_learner(cfg, model_path: str, tokenizer, need_ref: bool | None = None
                           ) -> DeepSpeedLearner:
    """Build the learner from a ``TrainConfig`` (the same mapping as the torch learner's).

    ``need_ref``: load a reference model here (default: when ``init_kl_coef > 0``); Ray
    runs pass False when separate reference workers score the batches.
    """
    from serl.engines.torch_learner import learner_config

    lc = learner_config(cfg)
    opts = DeepSpeedOptions(zero_stage=cfg.zero_stage, adam_offload=cfg.adam_offload,
                            param_offload=cfg.param_offload)
    if need_ref is None:
        need_ref = cfg.init_kl_coef > 0
    return DeepSpeedLearner(model_path, lc, need_ref=need_ref, tokenizer=tokenizer, opts=opts)


__all__ = ["DeepSpeedLearner", "DeepSpeedOptions", "deepspeed_available", "ds_config",
           "init_process_group", "make_deepspeed_learner"]
