"""A population of past selves on disk: which snapshots can be drawn, their files, and when a file may go.

Fictitious self-play as in SPIRAL (Liu et al., 2025: a pool of 25, a snapshot every 5 steps, the current
policy included). ``SnapshotPool`` is only bookkeeping: snapshots are named by path, the current policy
is the entry ``CURRENT``, and draws come from the pool's own seeded RNG, so a restored pool draws the same
opponents. ``SnapshotTrash`` deletes a file pushed out of the pool only once no kept checkpoint can need
it. ``Population`` ties both to a run directory and writes the snapshots (``serl.recipes.spiral.snapshots``);
a recipe asks it what is due, what to play and what to checkpoint, and serves the weights through a
``WeightSwitcher``.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable
from pathlib import Path

import torch

from serl.recipes.spiral.snapshots import CURRENT, save_snapshot

SNAPSHOT_DIR = "snapshots"


class SnapshotPool:
    """A FIFO of snapshot paths plus the current policy. ``size`` counts every entry that can be drawn,
    the current policy included when ``include_current``: ``size=1`` with it is pure self-play, ``size=2``
    is the current policy and the latest snapshot."""

    def __init__(self, size: int = 25, add_every: int = 5, include_current: bool = True, seed: int = 0) -> None:
        if int(size) < 1:
            raise ValueError(f"population size must be >= 1, got {size}")
        if int(add_every) < 1:
            raise ValueError(f"population add_every must be >= 1, got {add_every}")
        self.size, self.add_every, self.include_current = int(size), int(add_every), bool(include_current)
        self.capacity = self.size - 1 if self.include_current else self.size  # snapshots kept
        self.snapshots: deque[str] = deque()
        self.rng = random.Random(seed)

    def due(self, step: int) -> bool:
        """Whether a snapshot should be taken after training step ``step`` (1-based: steps N, 2N, ...)."""
        return self.capacity > 0 and step > 0 and step % self.add_every == 0

    def add(self, path: str) -> list[str]:
        """Add a snapshot; returns the snapshots pushed out (oldest first), whose files may be deleted.
        A pool with no room for snapshots (size 1 with the current policy) returns ``[path]`` at once."""
        if self.capacity == 0:
            return [str(path)]
        if str(path) == CURRENT:
            raise ValueError(f"a snapshot cannot be named {CURRENT!r}")
        self.snapshots.append(str(path))
        evicted = []
        while len(self.snapshots) > self.capacity:
            evicted.append(self.snapshots.popleft())
        return evicted

    def entries(self) -> list[str]:
        """What can be drawn, oldest snapshot first; the current policy last. Before any snapshot exists
        the current policy is the only entry, even when ``include_current`` is False."""
        out = list(self.snapshots)
        if self.include_current or not out:
            out.append(CURRENT)
        return out

    def sample(self, n: int) -> list[str]:
        """``n`` opponents drawn uniformly (with replacement) over ``entries()``."""
        entries = self.entries()
        return [entries[self.rng.randrange(len(entries))] for _ in range(n)]

    def state_dict(self) -> dict:
        version, internal, gauss = self.rng.getstate()
        return {
            "size": self.size,
            "add_every": self.add_every,
            "include_current": self.include_current,
            "snapshots": list(self.snapshots),
            "rng": [version, list(internal), gauss],
        }

    def load_state_dict(self, state: dict) -> None:
        try:
            pool = SnapshotPool(state["size"], state["add_every"], state["include_current"])
            for p in state["snapshots"]:
                pool.add(p)
            version, internal, gauss = state["rng"]
            pool.rng.setstate((int(version), tuple(int(x) for x in internal), gauss))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"population state: malformed ({type(e).__name__}: {e})") from e
        self.__dict__.update(pool.__dict__)


class SnapshotTrash:
    """Snapshot files pushed out of a population, deleted only once no kept checkpoint can need them:
    a checkpoint at step s restores the population as it was at s, so a file evicted at step e may
    go once a complete checkpoint at a step >= e exists. Its state is a list of (step, path)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir, self.items = Path(run_dir), list[tuple[int, str]]()

    def add(self, step: int, paths: Iterable[str]) -> None:
        self.items += [(int(step), str(p)) for p in paths]

    def empty(self) -> None:
        from serl.run.checkpoint import newest_step

        newest = newest_step(self.run_dir) if self.items else 0
        for _, p in [t for t in self.items if t[0] <= newest]:
            (self.run_dir / p).unlink(missing_ok=True)
        self.items = [t for t in self.items if t[0] > newest]

    def state_dict(self) -> list:
        return list(self.items)

    def load_state_dict(self, items) -> None:
        self.items = [(int(s), str(p)) for s, p in items]


class Population:
    """The pool, its snapshot files under ``RUN_DIR/snapshots`` (paths kept relative to the run
    directory, so a moved run still resumes) and the trash, checkpointed together."""

    def __init__(self, run_dir: str | Path, size: int, add_every: int, seed: int = 0) -> None:
        self.run_dir = Path(run_dir)
        self.pool = SnapshotPool(size, add_every, seed=seed)
        self.trash = SnapshotTrash(self.run_dir)

    def due(self, step: int) -> bool:
        return self.pool.due(step)

    def add(self, step: int, named_weights: Iterable[tuple[str, torch.Tensor]]) -> str:
        """Save the weights as step ``step``'s snapshot and add it; returns its relative path."""
        rel = f"{SNAPSHOT_DIR}/step_{step:06d}.safetensors"
        save_snapshot(named_weights, self.run_dir / rel)
        self.trash.add(step, self.pool.add(rel))
        return rel

    def sample(self, n: int) -> list[str]:
        """``n`` opponents: ``CURRENT`` or a snapshot path relative to the run directory."""
        return self.pool.sample(n)

    def path(self, entry: str) -> str:
        """The file of a drawn snapshot entry."""
        return str(self.run_dir / entry)

    def size(self) -> int:
        return len(self.pool.entries())

    def empty_trash(self) -> None:
        self.trash.empty()

    def state_dict(self) -> dict:
        return {"pool": self.pool.state_dict(), "trash": self.trash.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.pool.load_state_dict(state["pool"])
        missing = [p for p in self.pool.snapshots if not (self.run_dir / p).is_file()]
        if missing:
            raise FileNotFoundError(f"{self.run_dir}: population snapshot {missing[0]} is missing")
        self.trash.load_state_dict(state["trash"])
