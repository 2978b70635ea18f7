"""Atomic checkpoints of a whole run, and finding the newest complete one.

A checkpoint is ``RUN_DIR/checkpoints/step_NNNNNN/`` with the policy in Hugging Face
layout plus optimizer/scheduler state (``policy/``, written by the learner) and
``trainer_state.pt`` (step, RNG states, data order, counters). It is written into a
hidden temporary directory and renamed into place, so a crash at any moment leaves
the previous checkpoint intact; ``COMPLETE`` marks a finished one.
"""
from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import torch

CKPT_DIR = "checkpoints"
DONE = "COMPLETE"


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fault_point(name: str, step: int) -> None:
    """Test hook: ``SERL_FAULT=name:step`` kills this process with SIGKILL right here."""
    want = os.environ.get("SERL_FAULT", "")
    if want and want == f"{name}:{step}":
        os.kill(os.getpid(), signal.SIGKILL)


def save_checkpoint(run_dir: Path, step: int, learner, trainer_state: dict, keep: int = 2) -> Path:
    root = Path(run_dir) / CKPT_DIR
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    tmp = root / f".tmp-step_{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    learner.save(str(tmp / "policy"))
    fault_point("checkpoint", step)
    torch.save(trainer_state, tmp / "trainer_state.pt")
    (tmp / DONE).write_text(f"{step}\n")
    _fsync_dir(tmp)
    if final.exists():  # a re-run of the same step after a resume
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    for old in complete_checkpoints(run_dir)[:-max(1, keep)]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def complete_checkpoints(run_dir: Path) -> list[Path]:
    root = Path(run_dir) / CKPT_DIR
    if not root.is_dir():
        return []
    found = [p for p in root.glob("step_*") if (p / DONE).exists()]
    return sorted(found, key=lambda p: int(p.name.split("_")[1]))


def latest_checkpoint(run_dir: Path) -> Path | None:
    done = complete_checkpoints(run_dir)
    return done[-1] if done else None


def load_trainer_state(ckpt: Path) -> dict:
    return torch.load(ckpt / "trainer_state.pt", weights_only=False)
