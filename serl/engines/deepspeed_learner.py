"""The DeepSpeed learner: the Learner protocol on ZeRO stage 0-3, one rank per process.

The shared half (micro-batching, log-probs, objectives, metrics) is
``serl.engines.learner_core``, as for ``TorchLearner``; what differs:

- Data parallel inside the learner: every rank is handed the *whole* batch and trains on
  its own shard (unit ``i`` — a sequence, or a DPO pair — goes to rank ``i % world``). The loss is normalised over
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
- On CUDA each rank's engine lives on its ``LOCAL_RANK`` GPU; ``bf16`` makes the weights
  bf16 with DeepSpeed's fp32 master copy in the optimizer (``bf16_weights`` is the torch
  learner's way to the same; DeepSpeed always does this). Micro-batches are packed as
  in the torch learner (``LearnerConfig.pack``).
- ``save`` writes the HF-format policy (gathered, fp32 or bf16 as trained) plus
  DeepSpeed's own checkpoint under ``deepspeed/`` (sharded optimizer state, per-rank RNG
  and counters); ``load`` restores all of it. The directory must be on storage every
  rank sees.
- With ``lora_rank > 0`` (``serl.engines.lora``) only the adapter trains and is sharded;
  the reference is the base with the adapter off (no second model), ``named_weights``
  yields merged weights, and ``save`` writes the adapter in PEFT layout with a DeepSpeed
  checkpoint of the trainable parameters only (``exclude_frozen_parameters``).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from serl.engines.learner_core import (
    LearnerConfig,
    LearnerCore,
    Scorer,
    announce_attention,
    learner_attention,
    lr_multiplier,
)
from serl.engines.micro import Micro
from serl.models.resolve import tokenizer_for_save

log = logging.getLogger(__name__)

DS_DIR = "deepspeed"
TAG = "state"


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
        conf["gradient_clipping"] = cfg.max_norm if cfg.max_norm > 0 else 0.0
        if opts.adam_offload:  # DeepSpeed builds its CPU Adam from this
            conf["optimizer"] = {
                "type": "AdamW",
                "params": {
                    "lr": cfg.actor_learning_rate,
                    "betas": list(cfg.adam_betas),
                    "weight_decay": cfg.weight_decay,
                },
            }
    return conf


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def use_accelerator(device: str) -> None:
    """Make DeepSpeed's accelerator match ``device``. DeepSpeed picks it when first imported
    (CUDA whenever a GPU is visible), so ``--device cpu`` on a GPU machine must say so first."""
    if device != "cuda":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from deepspeed.accelerator import get_accelerator

    have = get_accelerator().device_name()
    if (have == "cuda") != (device == "cuda"):
        raise RuntimeError(
            f"the learner runs on {device}, but DeepSpeed's accelerator is {have} "
            f"(DS_ACCELERATOR={os.environ.get('DS_ACCELERATOR', 'unset')}; DeepSpeed "
            "fixes it when first imported): set DS_ACCELERATOR to match --device"
        )


def init_process_group(backend: str = "", device: str = "cpu") -> None:
    """Join (or, alone, start) the default process group; torchrun/Ray set the env vars.
    The backend follows the learner's device: NCCL for CUDA tensors, gloo for CPU ones."""
    if dist.is_initialized():
        return
    for k, v in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(k, v)
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    use_accelerator(device)
    import deepspeed

    deepspeed.init_distributed(
        dist_backend=backend or ("nccl" if device == "cuda" else "gloo"), auto_mpi_discovery=False
    )


class DeepSpeedLearner(LearnerCore):
    """Learner protocol on DeepSpeed ZeRO; see the module docstring."""

    def __init__(
        self, model_path: str, cfg: LearnerConfig, need_ref: bool, tokenizer=None, opts: DeepSpeedOptions | None = None
    ):
        use_accelerator(cfg.device)  # before deepspeed is imported: it picks its accelerator then
        import deepspeed
        from transformers.integrations import HfDeepSpeedConfig

        from serl.engines.causal_lm import load_causal_lm

        self.cfg, self.opts = cfg, opts or DeepSpeedOptions()
        self.model_path, self.tokenizer = model_path, tokenizer
        self.device = cfg.device
        if self.device == "cuda":  # one GPU per rank: the engine goes to this rank's GPU
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        init_process_group(self.opts.backend, self.device)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        torch.manual_seed(cfg.seed)
        dtype = torch.bfloat16 if cfg.bf16 else torch.float32
        choice = learner_attention(cfg)
        conf = ds_config(cfg, self.opts, train=True)
        # Under ZeRO-3 this makes from_pretrained partition the weights while loading,
        # so no rank ever holds the whole model; it must stay alive while models load.
        hf_ds = HfDeepSpeedConfig(conf) if self.opts.zero_stage == 3 else None
        lm = load_causal_lm(model_path, dtype=dtype, attn_implementation=choice.load)
        lm.train()
        if cfg.gradient_checkpointing:
            lm.config.use_cache = False
            lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        pad = getattr(lm.config, "pad_token_id", None)
        self.pad_id = int(pad) if isinstance(pad, int) else 0
        self.lm = lm
        self.lora = None
        if cfg.lora_rank:
            from serl.engines.lora import LoraAdapter

            self.lora = LoraAdapter(lm, cfg, model_path)  # freezes all but the adapter
        optimizer = None
        if not self.opts.adam_offload:
            shape = lambda p: getattr(p, "ds_shape", p.shape)  # noqa: E731  (ZeRO-3 flattens p)
            params = [p for p in lm.parameters() if p.requires_grad]
            optimizer = torch.optim.AdamW(
                [
                    {"params": [p for p in params if len(shape(p)) >= 2], "weight_decay": cfg.weight_decay},
                    {"params": [p for p in params if len(shape(p)) < 2], "weight_decay": 0.0},
                ],
                lr=cfg.actor_learning_rate * lr_multiplier(0, cfg),
                betas=tuple(cfg.adam_betas),
            )
        scorer = Scorer(lm, pack=cfg.pack, kernel=choice.packed)
        self.packed = scorer.packed
        self.attention = announce_attention(choice, self.packed, self.rank)
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=scorer,
            optimizer=optimizer,
            config=conf,
            model_parameters=None if optimizer else [p for p in lm.parameters() if p.requires_grad],
        )
        if self.lora is not None:
            # DeepSpeed's exclude_frozen_parameters drops frozen parameters by their listed
            # names, so a tied (frozen) LM head would still be saved; keep the adapter only.
            full_sd = self.engine.module_state_dict
            self.engine.module_state_dict = lambda *a, **k: {  # noqa: E731
                n: t for n, t in full_sd(*a, **k).items() if ".lora_" in n
            }
        self.ref: Any = None
        if need_ref and self.lora is not None:  # the base with the adapter off: no second model
            from serl.engines.lora import ReferenceNet

            self.ref = ReferenceNet(self.engine, self.lora, self._gather_many)
        elif need_ref:
            ref = load_causal_lm(model_path, dtype=dtype, attn_implementation=choice.load).eval()
            ref.requires_grad_(False)
            if self.opts.zero_stage == 3:
                self.ref, *_ = deepspeed.initialize(
                    model=Scorer(ref, pack=self.packed, kernel=choice.packed), config=ds_config(cfg, self.opts, False)
                )
            else:
                self.ref = Scorer(ref, pack=self.packed, kernel=choice.packed).to(self.device)
        del hf_ds
        self.updates = 0
        self.skipped_total = 0

    # ---------------------------------------------------------------- core hooks
    def _net(self, model: str):
        if model == "policy":
            return self.engine
        if model == "ref":
            if self.ref is None:
                raise ValueError(
                    "no reference model loaded (the recipe needs none: pass reference log-probs in the batch)"
                )
            return self.ref
        raise ValueError(f"model must be 'policy' or 'ref', got {model!r}")

    def _even_out(self, mbs: list[Micro]) -> list[Micro]:
        # under ZeRO-3 each pass gathers parameters collectively: every rank runs as many
        t = torch.tensor([len(mbs)], dtype=torch.long, device=self._coll_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return mbs + [self._dummy()] * (int(t.item()) - len(mbs))

    def _gather(self, mine: dict[int, Tensor]) -> dict[int, Tensor]:
        if self.world == 1:
            return mine
        parts: list = [None] * self.world
        dist.all_gather_object(parts, mine)
        return {i: t for part in parts for i, t in part.items()}

    def _coll_device(self) -> str:
        return "cuda" if dist.get_backend() == "nccl" else "cpu"

    def _all_reduce(self, sums: Tensor) -> None:
        if self.world > 1:
            t = sums.to(self._coll_device())
            dist.all_reduce(t)
            sums.copy_(t.cpu())

    def _zero_grad(self) -> None:
        pass  # the engine's gradients are zeroed after each step

    def _backward(self, loss: Tensor, finite: bool) -> None:
        # DeepSpeed averages gradients over ranks; the loss is already a share of the
        # whole batch, so scale it back up to get the sum. A non-finite loss still goes
        # through: the collectives must match, and ZeRO's overflow check drops the step.
        self.engine.backward(loss * self.world, scale_wrt_gas=False)

    def _apply_update(self, lr: float, finite: bool) -> tuple[bool, float]:
        # DeepSpeed's ZeRO optimizers check the global gradient norm and, when it is not
        # finite, drop the gradients and skip the update on every rank; we only read it back.
        for g in self.engine.optimizer.param_groups:
            g["lr"] = lr
        self.engine.step()
        applied = self.engine.was_step_applied() and finite
        grad_norm = float("nan")
        if applied:
            gn = self.engine.get_global_grad_norm()
            grad_norm = float(gn) if gn is not None else float("nan")
            self.updates += 1
        else:
            self.skipped_total += 1
            log.warning("non-finite loss or gradient: update %d skipped on all ranks", self.updates)
        self.engine.zero_grad()
        return applied, grad_norm

    @torch.no_grad()
    def sync_ref(self) -> None:
        """Copy the policy into the reference (collective: gathers under ZeRO-3)."""
        if self.ref is None:
            raise ValueError("sync_ref: this learner has no reference model (need_ref=False)")
        if self.lora is not None:
            self.lora.sync_ref(self._gather_many)
            return
        ref_lm = (self.ref.module if hasattr(self.ref, "module") else self.ref).lm
        ref = dict(ref_lm.named_parameters())
        for name, p in self.lm.named_parameters():
            with self._gathered(p), self._gathered(ref[name], modify=True):
                if self.opts.zero_stage != 3 or self.rank == 0:
                    ref[name].data.copy_(p.data)

    # ----------------------------------------------------------- weights, I/O
    @contextmanager
    def _gathered(self, p, modify: bool = False):
        if self.opts.zero_stage == 3 and hasattr(p, "ds_id"):
            import deepspeed

            with deepspeed.zero.GatheredParameters([p], modifier_rank=0 if modify else None):
                yield p
        else:
            yield p

    def _gather_many(self, params: list, modify: bool = False):
        """Make ``params`` whole on every rank (ZeRO-3), for LoRA's merges and swaps."""
        if self.opts.zero_stage != 3:
            return nullcontext()
        import deepspeed

        params = [p for p in params if hasattr(p, "ds_id")]
        return deepspeed.zero.GatheredParameters(params, modifier_rank=0 if modify else None)

    def named_weights(self) -> Iterator[tuple[str, Tensor]]:
        """Policy weights under HF names, one parameter gathered at a time (collective).

        ZeRO-3 yields a copy (the gathered storage goes away on the next parameter);
        other stages yield the live parameter, as the torch learner does. Under LoRA:
        the merged weights (new tensors for the adapted ones).
        """
        if self.lora is not None:
            yield from self.lora.merged_weights(self._gather_many, clone=self.opts.zero_stage == 3)
            return
        for name, p in self.lm.named_parameters():
            with self._gathered(p):
                t = p.detach()
                yield name, (t.clone() if self.opts.zero_stage == 3 else t)

    def export_hf(self, path: str) -> None:
        """Write the policy in HF layout on rank 0 (collective: gathers on every rank)."""
        sd = {}
        for name, t in self.named_weights():
            if self.rank == 0:
                sd[name] = t.detach().to("cpu", copy=True)
        if self.rank == 0:
            self.lm.save_pretrained(path, state_dict=sd)
            tok = tokenizer_for_save(self.tokenizer, self.model_path)
            if tok is not None:
                tok.save_pretrained(path)

    def save(self, path: str, state: bool = True) -> None:
        """HF policy + DeepSpeed checkpoint; written to ``path.tmp`` then moved (collective).
        ``state=False`` (the final model): the policy (LoRA: the adapter) and tokenizer only."""
        dest = Path(path)
        tmp = dest.with_name(dest.name + ".tmp")
        if self.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        dist.barrier()
        try:
            self._write(tmp, state)
        except BaseException:
            if self.rank == 0:  # a failed write (disk full) leaves nothing behind
                shutil.rmtree(tmp, ignore_errors=True)
            raise
        dist.barrier()
        if self.rank == 0:
            if dest.exists():
                shutil.rmtree(dest)
            os.replace(tmp, dest)
        dist.barrier()

    def _write(self, tmp: Path, state: bool) -> None:
        if self.lora is not None:  # the adapter in PEFT layout, written by rank 0
            self.lora.save(str(tmp), self._gather_many, write=self.rank == 0, state=state)
            tok = tokenizer_for_save(self.tokenizer, self.model_path) if self.rank == 0 else None
            if tok is not None:
                tok.save_pretrained(str(tmp))
        else:
            self.export_hf(str(tmp))
        if not state:
            return
        client = {
            "updates": self.updates,
            "skipped_total": self.skipped_total,
            "config": asdict(self.cfg),
            "options": asdict(self.opts),
        }
        self.engine.save_checkpoint(
            str(tmp / DS_DIR), tag=TAG, client_state=client, exclude_frozen_parameters=self.lora is not None
        )
        torch.save(torch.get_rng_state(), tmp / DS_DIR / f"rng_rank{self.rank}.pt")

    def load(self, path: str) -> None:
        """Restore weights, optimizer shards, schedule position and RNG from ``save``."""
        ckpt = Path(path) / DS_DIR
        if not (ckpt / TAG).is_dir():
            raise FileNotFoundError(f"{path}: not a DeepSpeed learner checkpoint (no {DS_DIR}/{TAG}/)")
        if self.lora is not None:  # refuse another base first; DeepSpeed restores the weights
            self.lora.load(path, weights=False)
        load_path, state = self.engine.load_checkpoint(
            str(ckpt),
            tag=TAG,
            load_optimizer_states=True,
            load_lr_scheduler_states=False,
            load_module_strict=self.lora is None,
        )
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


__all__ = ["DeepSpeedLearner", "DeepSpeedOptions", "deepspeed_available", "ds_config", "init_process_group"]
