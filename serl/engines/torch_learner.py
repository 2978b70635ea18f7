"""The plain-torch learner: one process, one policy (and a reference model only if needed).

The shared half (micro-batching, log-probs, the objective loop, metrics) is
``serl.engines.learner_core``; this file holds what is torch-specific:

- The policy and the reference live on ``LearnerConfig.device``. AdamW and the weights it
  updates are fp32. With ``bf16`` (and ``bf16_weights``, the default) the models compute
  with bf16 weights and the optimizer keeps an fp32 master copy
  (``serl.engines.master_weights``); with ``bf16_weights=False`` the weights stay fp32 and
  forward/backward run under autocast. Under LoRA the frozen weights are bf16 and the fp32
  adapter trains under autocast.
- ``named_weights`` yields the live parameters under their Hugging Face names; a tied
  LM head appears once, as ``model.embed_tokens.weight``, which is what
  ``from_pretrained`` and vLLM expect for ``tie_word_embeddings`` models.
- ``save`` writes the policy in HF layout (fp32 safetensors, config, tokenizer) and the
  optimizer, schedule and RNG state to ``learner_state.pt``; ``load`` restores all of
  them, so a resumed run continues bit-for-bit. ``save(path, state=False)`` (the run's
  final ``model/``) writes the policy alone.
- With ``lora_rank > 0`` (``serl.engines.lora``) only an adapter trains; the reference is
  the base with the adapter off, ``named_weights`` yields merged weights, and ``save``
  writes the adapter in PEFT layout instead of the whole policy.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from serl.engines.learner_core import (
    LearnerConfig,
    LearnerCore,
    Scorer,
    announce_attention,
    learner_attention,
    lr_multiplier,
)
from serl.engines.master_weights import MasterWeights, cast_parameters
from serl.models.resolve import tokenizer_for_save

log = logging.getLogger(__name__)

STATE_FILE = "learner_state.pt"


class TorchLearner(LearnerCore):
    """Learner protocol on plain torch; see the module docstring. ``trainable=False``
    builds a scorer only (no optimizer), as the Ray reference worker uses."""

    def __init__(self, model_path: str, cfg: LearnerConfig, need_ref: bool, tokenizer=None, trainable: bool = True):
        from serl.engines.causal_lm import load_causal_lm

        self.cfg = cfg
        self.model_path = model_path
        self.tokenizer = tokenizer
        self.device = cfg.device
        torch.manual_seed(cfg.seed)
        choice = learner_attention(cfg)
        self.policy = load_causal_lm(model_path, dtype=torch.float32, attn_implementation=choice.load).to(self.device)
        self.policy.train(trainable)
        self.policy.requires_grad_(trainable)
        if cfg.gradient_checkpointing and trainable:
            self.policy.config.use_cache = False
            self.policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.lora = None
        if cfg.lora_rank and trainable:
            from serl.engines.lora import LoraAdapter

            self.lora = LoraAdapter(self.policy, cfg, model_path)  # freezes all but the adapter
        # bf16 weights (fp32 masters in the optimizer) unless LoRA; under LoRA the frozen weights
        # are stored in bf16 (what autocast computes with) and the fp32 adapter trains under autocast
        self.bf16_weights = cfg.bf16 and cfg.bf16_weights and self.lora is None
        if self.lora is not None and cfg.bf16 and cfg.bf16_weights:
            self.lora.cast_base(torch.bfloat16)
        self.master = None
        if self.bf16_weights and trainable:
            self.master = MasterWeights(self.policy)
        elif self.bf16_weights:
            cast_parameters(self.policy, torch.bfloat16)
        self.ref: Any = None
        if need_ref and self.lora is None:  # under LoRA the reference is the base, adapter off
            self.ref = load_causal_lm(model_path, dtype=torch.float32, attn_implementation=choice.load)
            self.ref = self.ref.to(self.device).eval()
            self.ref.requires_grad_(False)
            if self.bf16_weights:
                cast_parameters(self.ref, torch.bfloat16)
        self._nets: dict[str, Any] = {
            "policy": Scorer(self.policy, pack=cfg.pack, kernel=choice.packed),
            "ref": Scorer(self.ref, pack=cfg.pack, kernel=choice.packed) if self.ref is not None else None,
        }
        self.packed = self._nets["policy"].packed
        self.attention = announce_attention(choice, self.packed)
        if self.lora is not None and need_ref:
            from serl.engines.lora import ReferenceNet

            self._nets["ref"] = ReferenceNet(self._nets["policy"], self.lora)
        pad = getattr(self.policy.config, "pad_token_id", None)
        self.pad_id = int(pad) if isinstance(pad, int) else 0
        self.optimizer: Any = None
        if trainable:
            params = self.master.masters if self.master else [p for p in self.policy.parameters() if p.requires_grad]
            decay = [p for p in params if p.dim() >= 2]
            no_decay = [p for p in params if p.dim() < 2]
            self.optimizer = torch.optim.AdamW(
                [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                lr=cfg.actor_learning_rate * lr_multiplier(0, cfg),
                betas=tuple(cfg.adam_betas),
                fused=True,
            )
        self.updates = 0  # optimizer steps taken (the schedule's position)
        self.skipped_total = 0  # updates skipped for non-finite loss/gradients

    # ---------------------------------------------------------------- core hooks
    def _net(self, model: str):
        if model not in self._nets:
            raise ValueError(f"model must be 'policy' or 'ref', got {model!r}")
        if self._nets[model] is None:
            raise ValueError("no reference model loaded (the recipe needs none: pass reference log-probs in the batch)")
        return self._nets[model]

    def _autocast(self):
        if self.cfg.bf16 and not self.bf16_weights:
            return torch.autocast(self.device, dtype=torch.bfloat16)
        return nullcontext()

    def _zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def _backward(self, loss: Tensor, finite: bool) -> None:
        if finite:  # a non-finite loss loses the update anyway: no backward through it
            loss.backward()

    def _apply_update(self, lr: float, finite: bool) -> tuple[bool, float]:
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        grad_norm = float("nan")
        if finite:
            max_norm = self.cfg.max_norm if self.cfg.max_norm > 0 else float("inf")
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
            finite = math.isfinite(grad_norm)
        if finite:
            for g in self.optimizer.param_groups:
                g["lr"] = lr
            self.optimizer.step()
            if self.master is not None:
                self.master.push()
            self.updates += 1
        else:
            self.skipped_total += 1
            log.warning("non-finite loss or gradient: update %d skipped", self.updates)
        self.optimizer.zero_grad(set_to_none=True)
        return finite, grad_norm

    @torch.no_grad()
    def sync_ref(self) -> None:
        if self._nets["ref"] is None:
            raise ValueError("sync_ref: this learner has no reference model (need_ref=False)")
        if self.lora is not None:
            self.lora.sync_ref()
            return
        ref = dict(self.ref.named_parameters())
        for name, p in self.named_weights():
            ref[name].copy_(p)

    # ----------------------------------------------------------- weights, I/O
    def named_weights(self) -> Iterator[tuple[str, Tensor]]:
        """The live policy parameters under HF names (no copies; tied head listed once);
        under LoRA the merged weights, computed out of place; with bf16 weights the fp32
        masters."""
        if self.lora is not None:
            yield from self.lora.merged_weights()
            return
        if self.master is not None:
            yield from self.master.named()
            return
        for name, p in self.policy.named_parameters():
            yield name, p.detach()

    def export_hf(self, path: str) -> None:
        """The policy in Hugging Face layout (under LoRA: merged) with its tokenizer."""
        tok = tokenizer_for_save(self.tokenizer, self.model_path)
        if self.lora is not None:
            self.lora.export_merged(path, tok)
            return
        self._save_policy(path)
        if tok is not None:
            tok.save_pretrained(path)

    def save(self, path: str, state: bool = True) -> None:
        """Policy in HF layout (under LoRA: the adapter in PEFT layout) + ``learner_state.pt``;
        written to a temp dir, then moved. ``state=False`` (the final model): weights, config
        and tokenizer only, no optimizer, schedule or RNG state."""
        dest = Path(path)
        tmp = dest.with_name(dest.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            self._write(tmp, state)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # a failed write (disk full) leaves nothing behind
            raise
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)

    def _write(self, tmp: Path, state: bool) -> None:
        tmp.mkdir(parents=True)
        if self.lora is not None:
            self.lora.save(str(tmp), state=state)
        else:
            self._save_policy(str(tmp))
        tok = tokenizer_for_save(self.tokenizer, self.model_path)
        if tok is not None:
            tok.save_pretrained(str(tmp))
        if state:
            torch.save(
                {
                    "optimizer": self.optimizer.state_dict(),
                    "updates": self.updates,
                    "skipped_total": self.skipped_total,
                    "rng": torch.get_rng_state(),
                    "config": asdict(self.cfg),
                },
                tmp / STATE_FILE,
            )

    def load(self, path: str) -> None:
        """Restore the weights, optimizer moments, schedule position and RNG from ``save``."""
        src = Path(path)
        state_file = src / STATE_FILE
        if not state_file.exists():
            raise FileNotFoundError(f"{path}: not a learner checkpoint (no {STATE_FILE})")
        if self.lora is not None:
            self.lora.load(path)  # refuses an adapter of another base or other settings
        else:
            self._load_weights(src)
        state = torch.load(state_file, map_location="cpu", weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
        self.skipped_total = int(state["skipped_total"])
        torch.set_rng_state(state["rng"])

    def load_policy(self, path: str) -> None:
        """The weights of a ``save(path, state=False)`` (the collapse guard's kept policy)
        alone: Adam's moments are reset, since they point where the policy was heading; the
        schedule position and RNG go on."""
        if self.lora is not None:
            self.lora.load_adapter(path)
        else:
            self._load_weights(Path(path))
        self.optimizer.state.clear()

    def _load_weights(self, src: Path) -> None:
        from safetensors.torch import load_file

        files = sorted(src.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"{src}: not a learner checkpoint (no *.safetensors)")
        sd: dict[str, Tensor] = {}
        for f in files:
            sd.update(load_file(str(f)))
        own = dict(self.named_weights())
        missing = sorted(set(own) - set(sd))
        unexpected = sorted(set(sd) - set(self.policy.state_dict()))
        if missing or unexpected:
            raise ValueError(
                f"{src}: weights do not match the model: missing {missing[:5]}, unexpected {unexpected[:5]}"
            )
        with torch.no_grad():
            for name, p in own.items():
                p.copy_(sd[name])  # copy_ crosses devices
        if self.master is not None:
            self.master.push()

    def _save_policy(self, path: str) -> None:
        """HF layout, fp32: the masters when the model computes in bf16."""
        if self.master is None:
            self.policy.save_pretrained(path)
            return
        self.policy.save_pretrained(path, state_dict=dict(self.master.named()))
        self.policy.config.dtype = torch.float32  # HF recorded the compute dtype; the files are fp32
        self.policy.config.save_pretrained(path)
