"""What ``serl eval``'s modes share (math, MMLU-Pro and games): building the generator
as training builds it, and writing result files atomically."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


class GeneratorUnavailable(RuntimeError):
    """The requested generation engine is not installed."""


def make_generator(kind: str, model_path: str, tokenizer, args):
    """(engine name, generator) through the engine factory, as training builds them."""
    from serl.engines import factory
    from serl.engines.vllm_generator import vllm_available

    if kind == "auto":
        kind = "vllm" if vllm_available() else "hf"
    if kind == "vllm" and not vllm_available():
        raise GeneratorUnavailable("--generator vllm but vllm is not installed")
    gen = factory.make_generator(
        kind,
        model_path,
        tokenizer,
        seed=args.seed,
        max_model_len=args.max_model_len,
        batch_size=args.batch_size,
        device=args.device,
        dtype=getattr(args, "dtype", "auto"),
    )
    if not getattr(args, "quiet", False):
        print(precision_line(kind, gen, getattr(args, "dtype", "auto")), file=sys.stderr, flush=True)
    return kind, gen


def precision_line(kind: str, gen, asked: str) -> str:
    """The start line: what the machine computes natively and the dtype the generator got."""
    import torch

    from serl.engines.precision import hardware

    on = "cuda" if torch.cuda.is_available() and (kind == "vllm" or getattr(gen, "device", "") == "cuda") else "cpu"
    return f"precision: {hardware(on).summary()}; generator {kind} in {getattr(gen, 'dtype', '?')} (--dtype {asked})"


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; results are meant to be read
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
