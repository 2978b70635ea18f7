"""Two things vLLM does that serl answers for: a warning known to be harmless, and an
engine that dies.

The warning. Each weight push (``reload_weights``) logs, from the worker process,
"RotaryEmbedding: Failed to load weights". vLLM's layer-wise reload counts every tensor
of a layer, buffers included, as loadable; the rotary embedding's only tensors are its
``cos_sin_cache`` buffers (``register_buffer(..., persistent=False)`` in
``vllm/model_executor/layers/rotary_embedding/base.py``), computed from the model's
RoPE settings and never found in a checkpoint. Nothing is loaded into the layer, so
``finalize_layerwise_processing`` (``vllm/model_executor/model_loader/reload/layerwise.py``)
warns and then puts the layer's own tensors back (``_place_kernel_tensors``): the cache
is kept as it was, which is right, since weights never change it. ``WorkerExtension``
drops exactly that message, on that one logger, only while serl pushes weights.

The death. When the engine's processes die (most often the kernel's out-of-memory
killer taking the worker that holds the model and KV cache), every later call raises
``EngineDeadError`` with a long traceback that names no cause. ``VLLMGenerator``
turns that into one ``EngineDied`` error: what died, the likely cause, what to change.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from serl.engines import stop

RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"
RELOAD_MESSAGE = "%s: Failed to load weights"


class HarmlessReloadWarning(logging.Filter):
    """Drops "<...>RotaryEmbedding: Failed to load weights" and nothing else; counts the drops."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        harmless = record.msg == RELOAD_MESSAGE and len(args) == 1 and str(args[0]).endswith("RotaryEmbedding")
        self.dropped += harmless
        return not harmless


class WorkerExtension:
    """Mixed into vLLM's worker class (``LLM(worker_extension_cls=...)``): its methods run
    in the worker process, where the reload logs."""

    def serl_reload_weights(self, weights_path: str) -> int:
        """``reload_weights`` from ``weights_path``; returns how many warnings it dropped."""
        log = logging.getLogger(RELOAD_LOGGER)
        quiet = HarmlessReloadWarning()
        log.addFilter(quiet)
        try:
            self.reload_weights(weights_path=weights_path)  # type: ignore[attr-defined]  # vLLM's worker, which this extends
        finally:
            log.removeFilter(quiet)
        return quiet.dropped


WORKER_EXTENSION = f"{__name__}.WorkerExtension"


# -- engine death -------------------------------------------------------------------------------


class EngineDied(RuntimeError):
    """The vLLM engine's processes are gone; the message says why (as far as can be told)
    and what to change. ``log_path``: where the runner kept the full traceback, if it did."""

    log_path: Path | None = None


def oom_kills() -> int | None:
    """The kernel's count of out-of-memory kills: this machine's (/proc/vmstat) plus this
    container's (cgroup v2 memory.events or v1 memory.oom_control); None where unreadable."""
    total, found = 0, False
    for path in ("/proc/vmstat", "/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
        try:
            for line in Path(path).read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    total, found = total + int(value), True
        except (OSError, ValueError):
            continue
    return total if found else None


def death_message(
    dead: list[str], oom_before: int | None, oom_after: int | None, on_cpu: bool, log_offset: int = 0
) -> str:
    """One message for a dead engine. ``dead``: the engine processes found gone (e.g.
    "VLLM::Worker pid 1234"), empty when vLLM only said so."""
    what = f" ({', '.join(dead)})" if dead else ""
    by = stop_signal(log_offset)
    if by:  # stopped, not starved: no advice about memory
        return f"the vLLM engine process stopped on {by}{what}; the run was asked to stop"
    if oom_before is not None and oom_after is not None and oom_after > oom_before:
        cause = (
            f"Cause: memory. The kernel's out-of-memory killer ran while the engine was up "
            f"(its oom_kill count went from {oom_before} to {oom_after})."
        )
    else:
        cause = (
            "Likely cause: memory. A process the kernel kills for lack of memory leaves no message "
            "of its own; if it crashed instead, vLLM's log above says how."
        )
    if on_cpu:
        fix = (
            "give the engine less KV-cache memory (--vllm_kv_cache_gib, default 2; a 0.5B model's "
            "64 rollouts need about 0.5), make sequences or batches smaller (--generate_max_len, --prompt_max_len, "
            "--rollout_batch_size, --n_samples_per_prompt), stop other jobs that use memory, "
            "or generate without vLLM (--generator hf)."
        )
    else:
        fix = (
            "lower --vllm_gpu_memory_utilization, make sequences or batches smaller "
            "(--generate_max_len, --prompt_max_len, --rollout_batch_size, --n_samples_per_prompt), "
            "or generate without vLLM (--generator hf)."
        )
    return f"the vLLM engine process died{what}. {cause} To go on: {fix}"


def log_size() -> int:
    """The engine log's size now (0 when there is none): where a new engine's lines begin."""
    try:
        return os.path.getsize(os.environ.get("SERL_ENGINE_LOG", ""))
    except OSError:
        return 0


def stop_signal(log_offset: int = 0) -> str | None:
    """The stop signal behind an engine's death, if any: one this process received (serl.engines.stop),
    or one vLLM's engine logged receiving ("trigger received signal=SIGINT") in RUN_DIR/engine.log
    after ``log_offset`` (its size when this engine started)."""
    if stop.received:
        return stop.received
    path = os.environ.get("SERL_ENGINE_LOG")
    try:
        with open(path, "rb") if path else open(os.devnull, "rb") as f:
            f.seek(log_offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    found = re.findall(r"received signal=(SIG[A-Z]+)", text)
    return found[-1] if found else None


def is_engine_dead_error(exc: BaseException) -> bool:
    """vLLM's ``EngineDeadError`` (looked up by name: its module moved between versions)."""
    return any(t.__name__ == "EngineDeadError" for t in type(exc).__mro__)
