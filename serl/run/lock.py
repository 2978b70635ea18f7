"""One writer per run directory: an exclusive ``flock`` on ``RUN_DIR/run.lock``.

``serl train`` takes it before it writes anything into the run directory and holds
it until the run ends.  A second process on the same directory (a new run or a
``--resume``) is refused in one line that names the holder's pid.  The kernel
drops the lock when its holder dies, however it dies (SIGKILL included), so a
lock file left by a killed run never blocks ``--resume``. A run that ends removes the file
while it still holds the lock; a process that opened the file just before then finds, once
it has the lock, that the path no longer names the file it locked, and starts over.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

from serl import ConfigError

LOCK_NAME = "run.lock"


class RunLock:
    """The held lock; ``release()`` (or process exit) drops it."""

    def __init__(self, path: Path, fd: int):
        self.path, self.fd = path, fd

    def release(self, remove: bool = True) -> None:
        if self.fd >= 0:
            if remove:  # still held: nobody can take the file between this and the close
                try:
                    os.unlink(self.path)
                except OSError:
                    pass
            os.close(self.fd)  # closing the only descriptor drops the flock
            self.fd = -1


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return f"pid {text}" if text.isdigit() else "another process (pid not yet written)"


def lock_run_dir(run_dir: Path, new: bool, leftovers: tuple[str, ...] = ()) -> RunLock:
    """Create ``run_dir`` if needed and lock it; ``new``: it must hold nothing else but
    ``leftovers`` (files this start or a failed one writes before the lock, e.g. engine.log;
    anything more means a run that started meanwhile and already finished wrote into it)."""
    run_dir = Path(run_dir)
    path = run_dir / LOCK_NAME
    while True:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise ConfigError(
                f"run_dir: cannot write in {run_dir}: {e.strerror}; choose a writable directory"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            who = _holder(fd)
            os.close(fd)
            raise ConfigError(
                f"run_dir: {run_dir} is in use by {who} (a serl run holds {path}); wait for it "
                f"to end or stop it, then --resume {run_dir}; or choose another directory"
            ) from None
        if _same_file(fd, path):
            break
        os.close(fd)  # the run that held it ended and removed it meanwhile: lock the path's file now
    if new and any(p.name not in (LOCK_NAME, *leftovers) for p in run_dir.iterdir()):
        os.close(fd)
        raise ConfigError(
            f"run_dir: {run_dir} already exists and is not empty "
            f"(use --resume {run_dir} to continue it, or choose another directory)"
        )
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return RunLock(path, fd)


def check_writable(run_dir: Path) -> None:
    """Refuse a run directory serl could not write, before any model loads: a read-only
    --run_dir/--save_path otherwise failed with an OSError traceback after the load.
    Tries it (a directory made and removed at once in the nearest existing folder):
    permission bits alone do not say it for root or for a read-only mount."""
    run_dir = Path(run_dir)
    where = run_dir
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".serl-write-check-", dir=where))
    except OSError as e:
        raise ConfigError(
            f"run_dir: cannot write in {where} ({e.strerror or e}), so the run directory "
            f"{run_dir} cannot be made there; choose a writable --run_dir (--save_path)"
        ) from None
