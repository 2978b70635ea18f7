"""The opponent population: a FIFO pool of past policy snapshots plus the current policy (fictitious
self-play as in SPIRAL, Liu et al., 2025: pool of 25, a snapshot every 5 steps, current included).

Only bookkeeping: snapshots are referred to by path (the trainer saves and loads the weights). The
current policy is the entry ``CURRENT``. ``size`` counts every entry that can be drawn, the current
policy included when ``include_current``: ``size=1`` with it is pure self-play, ``size=2`` is the
current policy and the latest snapshot. Opponents are drawn uniformly over the entries with the pool's
own seeded RNG, so a restored pool draws the same opponents.
"""
from __future__ import annotations

import random
from collections import deque

CURRENT = "current"


class SnapshotPool:
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
        return {"size": self.size, "add_every": self.add_every, "include_current": self.include_current,
                "snapshots": list(self.snapshots), "rng": [version, list(internal), gauss]}

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
