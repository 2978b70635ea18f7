"""Atomic checkpoints of a whole run, and finding the newest complete one.

A checkpoint is ``RUN_DIR/checkpoints/step_NNNNNN/`` with the policy in Hugging Face
layout plus optimizer/scheduler state (``policy/``, written by the learner) and
``trainer_state.pt`` (``serl.run.state``: step, RNG states, the generator's and the
recipe's state). Only this module knows the layout of the checkpoint directory. It is written into a
hidden temporary directory and renamed into place, so a crash at any moment leaves
the previous checkpoint intact; ``COMPLETE`` marks a finished one.

A write that runs out of disk space (or quota) raises ``DiskFullError``: one message
saying where, how much is free, which checkpoint is intact and what to do, in place of
the library's own error (torch reports a full disk as "unexpected pos ... vs ...").
The partial write is removed.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
from contextlib import contextmanager
from pathlib import Path

CKPT_DIR = "checkpoints"
DONE = "COMPLETE"

# How a full disk shows through the writers: OSError(ENOSPC) from Python, Rust's text
# from safetensors; torch's stream writer says only "unexpected pos", so the free space
# left after the failed write decides (a writer stops when nothing is left).
_NO_SPACE_ERRNO = (errno.ENOSPC, errno.EDQUOT)
_NO_SPACE_TEXT = ("No space left on device", "Disk quota exceeded", "os error 28", "os error 122")
LOW_SPACE = 16 << 20  # bytes: less than this free after a failed write means the disk was full


class DiskFullError(RuntimeError):
    """A checkpoint or the final model could not be written: the disk is full."""


def out_of_space(exc: BaseException, where: Path) -> bool:
    """Whether ``exc`` (a failed write under ``where``) came from a full disk."""
    seen = set()
    e = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _NO_SPACE_ERRNO:
            return True
        if any(t in str(e) for t in _NO_SPACE_TEXT):
            return True
        e = e.__cause__ or e.__context__  # type: ignore[assignment]  # None ends the loop
    try:
        return shutil.disk_usage(_existing(where)).free < LOW_SPACE
    except OSError:
        return False


def _existing(p: Path) -> Path:
    p = Path(p).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _size(p: Path) -> int:
    return sum(f.stat().st_size for f in Path(p).rglob("*") if f.is_file())


def _mb(n: int) -> str:
    return f"{n / 2**30:.2f} GB" if n >= 2**30 else f"{n / 2**20:.1f} MB"


@contextmanager
def disk_space_guard(target: Path, run_dir: Path, what: str, partial: tuple[Path, ...] = ()):
    """Around the write of ``what`` to ``target``: on any failure remove ``partial``; when
    the disk was full, raise ``DiskFullError`` with what to do instead of the raw error."""
    try:
        yield
    except Exception as e:
        full = out_of_space(e, target)
        for p in partial:
            shutil.rmtree(p, ignore_errors=True)
        if not full:
            raise
        raise DiskFullError(_disk_full_message(Path(target), Path(run_dir), what)) from e


def _disk_full_message(target: Path, run_dir: Path, what: str) -> str:
    try:
        du = shutil.disk_usage(_existing(target))
        space = (
            f"{_mb(du.free)} free of {_mb(du.total)} on the filesystem of {run_dir}, after removing the partial write"
        )
    except OSError:
        space = "free space unknown"
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        intact = "No checkpoint of this run is complete yet (a resume starts again from step 1)."
        need = ""
    else:
        intact = f"The newest complete checkpoint, step {checkpoint_step(ckpt)} ({ckpt}), is intact."
        need = f"; one checkpoint takes {_mb(_size(ckpt))}"
    return (
        f"out of disk space writing {what} to {target} ({space}{need}). {intact} Free space there "
        f"(or keep fewer checkpoints with --max_ckpt_num, or move the run directory to a larger disk), "
        f"then continue with: serl train --resume {run_dir}"
    )


def fsync_dir(d: Path) -> None:
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


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    """Where the checkpoint of ``step`` lives (complete or not)."""
    return Path(run_dir) / CKPT_DIR / f"step_{step:06d}"


def checkpoint_step(ckpt: Path) -> int:
    """The step a checkpoint directory holds."""
    return int(Path(ckpt).name.split("_")[1])


RUN_CONFIG = "run_config.json"  # the run-defining options the checkpoint was made with (serl.run.resume)


def save_checkpoint(
    run_dir: Path, step: int, learner, trainer_state: dict, keep: int = 2, run_config: dict | None = None
) -> Path:
    root = Path(run_dir) / CKPT_DIR
    root.mkdir(parents=True, exist_ok=True)
    final = checkpoint_dir(run_dir, step)
    tmp = root / f".tmp-step_{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    with disk_space_guard(root, run_dir, f"the checkpoint of step {step}", partial=(tmp,)):
        import torch

        tmp.mkdir()
        learner.save(str(tmp / "policy"))
        fault_point("checkpoint", step)
        torch.save(trainer_state, tmp / "trainer_state.pt")
        if run_config is not None:
            (tmp / RUN_CONFIG).write_text(json.dumps(run_config, default=str, sort_keys=True) + "\n")
        (tmp / DONE).write_text(f"{step}\n")
        fsync_dir(tmp)
    if final.exists():  # a re-run of the same step after a resume
        shutil.rmtree(final)
    os.replace(tmp, final)
    fsync_dir(root)
    for old in complete_checkpoints(run_dir)[: -max(1, keep)]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def complete_checkpoints(run_dir: Path) -> list[Path]:
    root = Path(run_dir) / CKPT_DIR
    if not root.is_dir():
        return []
    found = [p for p in root.glob("step_*") if (p / DONE).exists()]
    return sorted(found, key=checkpoint_step)


def latest_checkpoint(run_dir: Path) -> Path | None:
    done = complete_checkpoints(run_dir)
    return done[-1] if done else None


def newest_step(run_dir: Path) -> int:
    """The step of the newest complete checkpoint; 0 when there is none."""
    ckpt = latest_checkpoint(run_dir)
    return checkpoint_step(ckpt) if ckpt else 0


def restore_reference(run_dir: Path, learner, ref_step: int, now_step: int) -> None:
    """Make the learner's reference the policy of checkpoint ``ref_step``, then put back the
    policy of ``now_step`` (a resume inside a window whose reference lags the policy)."""
    ref, now = checkpoint_dir(run_dir, ref_step), checkpoint_dir(run_dir, now_step)
    if not (ref / DONE).exists():
        raise RuntimeError(
            f"--resume: the reference model of this step is the policy of step {ref_step}, but "
            f"{ref} is gone; keep it (--save_steps at the reference's period and "
            f"--max_ckpt_num >= 2)"
        )
    learner.load(str(ref / "policy"))
    learner.sync_ref()
    learner.load(str(now / "policy"))


def load_trainer_state(ckpt: Path) -> dict:
    import torch

    return torch.load(ckpt / "trainer_state.pt", weights_only=False)


def resume_hint(run_dir) -> str:
    """What a run that stopped on a failed step keeps: its newest checkpoint, which the failed step
    did not touch (a checkpoint is written after its step, atomically), and how to go on."""
    ckpt = latest_checkpoint(Path(run_dir))
    if ckpt is None:
        return f"no checkpoint had been saved yet in {run_dir} (see --save_steps); nothing to resume"
    return (
        f"the last checkpoint, {ckpt} (step {checkpoint_step(ckpt)}), is intact: then continue with "
        f"`serl train --resume {run_dir}`"
    )
