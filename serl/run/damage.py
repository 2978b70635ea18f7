"""What a resume checks before any engine starts: is the checkpoint whole, are the logs readable.

A checkpoint marked ``COMPLETE`` can still be damaged later (a disk error, a copy
cut short, a file truncated by hand), and a log can get a stray line.  Found while
restoring, after the model had loaded, such damage ended in a traceback 30 to 50 s
into the resume.  These checks read only headers and directories (no weights), so
they cost milliseconds:

* ``*.safetensors``: the header's length and JSON, and a file long enough for
  every tensor the header lists;
* ``*.pt`` / ``*.bin`` written by ``torch.save`` (zip files): the zip directory at
  the end of the file, and every member inside the file;
* ``*.json``: parses;
* ``trainer_state.pt`` present.

:func:`intact_checkpoint` takes the newest checkpoint that passes, with a warning that
names the damaged file of each newer one; with none intact it refuses in one line.
:func:`check_logs` reads ``metrics.jsonl`` and ``pool.jsonl`` as the resume will, so a
bad line is named by file and line before the model loads.
"""

from __future__ import annotations

import json
import logging
import struct
import zipfile
from pathlib import Path

from serl import ConfigError
from serl.run.checkpoint import DONE, checkpoint_step, complete_checkpoints

log = logging.getLogger("serl")


def safetensors_damage(path: Path) -> str | None:
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return f"{size} bytes, shorter than a safetensors header"
        (n,) = struct.unpack("<Q", head)
        if n > min(size - 8, 100 << 20):
            return f"header of {n} bytes does not fit in the file's {size} bytes (truncated?)"
        try:
            header = json.loads(f.read(n))
        except (ValueError, RecursionError):
            return "unreadable header"
    if not isinstance(header, dict):
        return "unreadable header"
    end = 0
    for name, t in header.items():
        if name != "__metadata__":
            try:
                end = max(end, int(t["data_offsets"][1]))
            except (TypeError, KeyError, IndexError, ValueError):
                return f"tensor {name[:80]!r} has no data offsets"
    if 8 + n + end > size:
        return f"{size} bytes, but its tensors need {8 + n + end} (truncated)"
    return None


def zip_damage(path: Path) -> str | None:
    size = path.stat().st_size
    if not zipfile.is_zipfile(path):
        with open(path, "rb") as f:  # torch's legacy format starts with a pickle; a cut zip with 'PK'
            return "truncated (its zip directory is missing)" if f.read(2) == b"PK" else None
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                if info.header_offset + info.compress_size > size:
                    return f"member {info.filename[:80]!r} runs past the end of the file (truncated)"
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        return f"unreadable ({e})"
    return None


def file_damage(path: Path) -> str | None:
    """Why ``path`` cannot be a whole checkpoint file, or None."""
    try:
        if path.suffix == ".safetensors":
            return safetensors_damage(path)
        if path.suffix in (".pt", ".bin", ".pth"):
            return zip_damage(path)
        if path.suffix == ".json":
            json.loads(path.read_bytes())
    except (ValueError, RecursionError):
        return "not valid JSON"
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    return None


def checkpoint_damage(ckpt: Path) -> tuple[Path, str] | None:
    """The first damaged file of a checkpoint and why, or None when it looks whole."""
    state = ckpt / "trainer_state.pt"
    if not state.is_file():
        return state, "missing"
    for path in sorted(p for p in ckpt.rglob("*") if p.is_file() and p.name != DONE):
        why = file_damage(path)
        if why:
            return path, why
    return None


def intact_checkpoint(run_dir: Path, warn: bool = True) -> Path | None:
    """The newest complete checkpoint that is not damaged (None: the run has none yet).
    Newer damaged ones are skipped with a warning naming the file; none intact: ConfigError."""
    damaged: list = []
    for ckpt in reversed(complete_checkpoints(run_dir)):
        found = checkpoint_damage(ckpt)
        if found is None:
            if damaged and warn:
                for bad, path, why in damaged:
                    log.warning("--resume: checkpoint %s is damaged (%s: %s); it is skipped", bad.name, path, why)
                log.warning(
                    "--resume: continuing from the newest intact checkpoint, step %d (%s); the steps "
                    "after it are trained again",
                    checkpoint_step(ckpt),
                    ckpt,
                )
            return ckpt
        damaged.append((ckpt, *found))
    if damaged:
        _, path, why = damaged[0]
        raise ConfigError(
            f"--resume: every checkpoint of {run_dir} is damaged (newest: {path}: {why}); "
            f"restore the file from a copy, or start a new run directory"
        )
    return None


def check_logs(run_dir: Path, step: int) -> None:
    """Read metrics.jsonl and pool.jsonl as the resume will; a bad line raises DataError (file:line)."""
    from serl.report.metrics import read_steps

    read_steps(Path(run_dir) / "metrics.jsonl")
    if (Path(run_dir) / "pool.jsonl").is_file():
        from serl.config.registry import recipe_module

        recipe_module("serl", "instruct.pool").PromptPool.load(run_dir, until_step=step, truncate=False)
