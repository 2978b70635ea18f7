"""Fair scoring for the reward server: a fast lane and a slow lane.

One worker pool serves one batch at a time, so a single request inside every
limit (16 prompts x 256 distinct symbolic answers: up to a million math-verify
checks) held the whole pool for its full time budget, and every other client
waited behind it.  :class:`Lanes` gives the server two pools:

* the fast lane takes every batch whose estimated work is small, with a short
  budget (``fast_budget`` seconds once it has the pool).  Normal traffic (whole
  groups of 8, mostly numbers) needs a few milliseconds a batch;
* a batch estimated big goes straight to the slow lane, and a batch that runs
  past the fast budget is stopped there (its workers are restarted, which costs
  tens of milliseconds) and goes on in the slow lane with what is left of its
  time budget.  Checks found bad in the fast lane stay marked bad.

So a big request can hold at most the slow lane; a small request waits at most
one fast budget behind a batch that was wrongly estimated small.  Waiting for
the slow lane counts against the request's budget, so queued big requests end
with ``OverBudget`` (503) instead of piling up.

``health()`` is not ok when some caller has waited for the fast lane (queue and
run together) longer than ``stall_seconds``: the scorer is stalled or saturated.
"""

from __future__ import annotations

import threading
import time

from serl.rewards.equivalence import OverBudget
from serl.rewards.normalize import normalize, plain_number


def estimated_checks(jobs: list[dict]) -> int:
    """Upper bound on math-verify checks for worker jobs: an answer that is not a plain
    number may be compared with every other answer of its group (numbers with each
    other are settled by the cheap rules)."""
    total = 0
    for job in jobs:
        if job.get("kind") == "pairs":
            total += len(job["pairs"])
            continue
        strings = job["strings"]
        symbolic = sum(1 for s in strings if plain_number(normalize(s)) is None)
        total += symbolic * len(strings)
    return total


class Lanes:
    """A checker-like pair of pools (``run_jobs``, ``stats``, ``close``, ``terminate``)."""

    def __init__(self, fast, slow, *, fast_budget: float = 1.0, big_checks: int = 400, stall_seconds: float = 5.0):
        self.fast, self.slow = fast, slow
        self.fast_budget, self.big_checks = float(fast_budget), int(big_checks)
        self.stall_seconds = float(stall_seconds)
        self._slow_lock = threading.Lock()
        self._waiting: dict[int, float] = {}  # id of a fast-lane call -> when it arrived
        self._lock = threading.Lock()
        self.moved = 0  # batches stopped in the fast lane and finished in the slow one
        self.sent_slow = 0  # batches estimated big

    @property
    def stats(self) -> dict:
        out = dict(getattr(self.fast, "stats", {}))
        for k, v in getattr(self.slow, "stats", {}).items():
            out[k] = out.get(k, 0) + v
        out["moved_to_slow_lane"], out["sent_to_slow_lane"] = self.moved, self.sent_slow
        return out

    @property
    def busy_since(self):
        return getattr(self.fast, "busy_since", None)

    def health(self) -> dict:
        now = time.monotonic()
        with self._lock:
            oldest = max((now - t for t in self._waiting.values()), default=0.0)
            queued = len(self._waiting)
        return {
            "ok": oldest <= self.stall_seconds,
            "fast_lane_calls": queued,
            "fast_lane_oldest_s": round(oldest, 3),
            "slow_lane_busy": self._slow_lock.locked(),
        }

    def run_jobs(self, jobs: list[dict], time_budget: float | None = None) -> list:
        start = time.monotonic()
        if estimated_checks(jobs) <= self.big_checks:
            key = object()
            with self._lock:
                self._waiting[id(key)] = start
            try:
                budget = self.fast_budget if time_budget is None else min(self.fast_budget, time_budget)
                return self.fast.run_jobs(jobs, time_budget=budget)
            except OverBudget:
                if time_budget is not None and time_budget <= self.fast_budget:
                    raise  # its whole budget is spent
                self.moved += 1
            finally:
                with self._lock:
                    del self._waiting[id(key)]
        else:
            self.sent_slow += 1
        left = None if time_budget is None else time_budget - (time.monotonic() - start)
        if not self._slow_lock.acquire(timeout=-1 if left is None else max(0.0, left)):
            raise OverBudget(
                f"the slow lane stayed busy for the whole budget of {time_budget:g} s; no reward was computed"
            )
        try:
            if left is not None and time_budget is not None:
                left = time_budget - (time.monotonic() - start)
                if left <= 0:
                    raise OverBudget(f"no time left of the budget of {time_budget:g} s; no reward was computed")
            return self.slow.run_jobs(jobs, time_budget=left)
        finally:
            self._slow_lock.release()

    def close(self) -> None:
        self.fast.close()
        self.slow.close()

    def terminate(self) -> None:
        for pool in (self.fast, self.slow):
            (getattr(pool, "terminate", None) or pool.close)()
