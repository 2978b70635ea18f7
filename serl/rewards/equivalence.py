"""Mathematical equivalence of answers, checked in a pool of worker processes.

Why processes: math-verify's own timeouts use ``signal.alarm``, which only works
in a main thread, and a check can hang inside C code that no signal interrupts.
So every check runs in a worker process (its main thread), and the parent
enforces a hard per-check timeout by killing and replacing a worker whose
current check runs too long.  A timed-out check counts as "not equal" and in
``stats["timeouts"]``; the job is sent again with that check marked bad, so the
rest of its work is still done.

Order of work for one pair: the cheap rules of :mod:`serl.rewards.normalize`
(in the parent for ``equal``/``equal_many``, and again in the worker), then
math-verify ``parse`` (cached per worker) and ``verify(gold=a, target=b)``.

Whole groups are shipped to a worker as one job (see :mod:`serl.rewards.vote`),
so the pool runs one group per worker in parallel and the per-job overhead is
one pipe round trip.

Failing loudly:

* Workers never re-import the user's ``__main__`` (:mod:`serl.rewards.worker_slot`).
* A worker says "ready" once it is up.  A worker that dies (or is silent for
  ``start_timeout`` s) before that is a start failure; ``max_start_failures``
  of them in a row raise :class:`WorkerStartError` instead of restarting
  forever.
* A check that raises inside math-verify counts as "not equal", like a timeout,
  and is counted in ``stats["check_errors"]``.  A job the pool cannot finish (a
  worker error outside any check, or three crashes outside any check) raises
  :class:`RewardPoolError`: no reward is ever computed from checks that did
  not run.  After any error the pool is torn down and restarts on the next call.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import threading
import time
from collections import deque
from multiprocessing.connection import wait

from serl.rewards.normalize import cheap_compare
from serl.rewards.worker_slot import Slot

_STAT_KEYS = (
    "calls",
    "string_matches",
    "verify_calls",
    "parse_calls",
    "timeouts",
    "soft_timeouts",
    "hard_timeouts",
    "restarts",
    "crashes",
    "skipped_long",
    "too_big",
    "blocked",
    "jobs",
    "check_errors",
    "start_failures",
)
READY = "ready"  # a worker's first message


def checker_counts(checker) -> dict[str, int]:
    """A copy of a checker's running counters (``EquivalenceChecker.stats``; summed over the
    workers for Ray's reward group); {} for a checker that keeps none."""
    stats = getattr(checker, "stats", None)
    return dict(stats) if isinstance(stats, dict) else {}


class RewardPoolError(RuntimeError):
    """The worker pool could not finish a job; no reward is given for it."""


class WorkerStartError(RewardPoolError):
    """Worker processes keep dying before they are ready."""


class OverBudget(RewardPoolError):
    """A batch ran past its ``time_budget``; its workers were killed (the next call restarts them)."""


class EquivalenceChecker:
    """Pool of math-verify workers with a hard per-check timeout.

    ``timeout``: seconds one parse or verify may take before the worker is
    killed (the check counts as "not equal").  ``workers``: processes.
    ``soft_timeout``: also stop pure-Python hangs with ``SIGALRM`` inside the
    worker at 0.8 x timeout (cheaper than a restart); False = hard kills only.
    ``max_answer_chars``: longer answers are compared by the cheap rules only.
    ``max_memory_mb``: address-space limit of each worker.
    ``start_method``: ``forkserver`` (default; safe when the parent has threads,
    and restarts are fast because the server preloads math-verify) or ``spawn``.
    ``max_start_failures``: workers dying before they are ready this many times
    in a row raise :class:`WorkerStartError`.  ``start_timeout``: seconds a new
    worker may take to become ready (counts as a start failure past it).

    Thread-safe: calls from several threads are served one batch at a time.
    Pickling keeps only the settings; the copy starts its own pool on first use.
    """

    def __init__(
        self,
        timeout: float = 3.0,
        workers: int = 2,
        *,
        soft_timeout: bool = True,
        max_answer_chars: int = 2000,
        max_memory_mb: int | None = 4096,
        start_method: str = "forkserver",
        max_start_failures: int = 3,
        start_timeout: float = 120.0,
    ):
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if max_start_failures < 1 or start_timeout <= 0:
            raise ValueError("max_start_failures must be >= 1 and start_timeout > 0")
        self.timeout = float(timeout)
        self.workers = int(workers)
        self.soft_timeout = bool(soft_timeout)
        self.max_answer_chars = int(max_answer_chars)
        self.max_memory_mb = max_memory_mb
        self.start_method = start_method
        self.max_start_failures = int(max_start_failures)
        self.start_timeout = float(start_timeout)
        self._start_failures = 0  # in a row
        self.stats: dict[str, int] = {k: 0 for k in _STAT_KEYS}
        self._slots: list[Slot] = []
        self._lock = threading.Lock()
        self._closed = False
        self.busy_since: float | None = None  # time.monotonic() when the running batch started

    # -- lifecycle ----------------------------------------------------------
    def _ensure_started(self) -> None:
        if self._closed:
            raise RuntimeError("EquivalenceChecker is closed")
        if self._slots:
            return
        ctx = mp.get_context(self.start_method)
        if self.start_method == "forkserver":
            ctx.set_forkserver_preload(["serl.rewards._worker"])
        soft = 0.8 * self.timeout if self.soft_timeout else None
        args = (soft, self.max_answer_chars, self.max_memory_mb)
        self._slots = [Slot(ctx, args) for _ in range(self.workers)]

    def close(self) -> None:
        with self._lock:
            for slot in self._slots:
                slot.stop()
            self._slots = []
            self._closed = True

    def terminate(self) -> None:
        """Kill every worker now, without waiting for a batch in flight (which then
        fails): for a server's shutdown.  The checker is closed afterwards."""
        self._closed = True
        for slot in list(self._slots):
            slot.kill()

    def _tear_down(self) -> None:
        """Kill every worker (jobs in flight would answer the next call); the
        next call starts a fresh pool."""
        for slot in self._slots:
            slot.kill()
        self._slots = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if self._slots:
                for slot in self._slots:
                    slot.kill()
        except Exception:
            pass

    def __getstate__(self):
        state = {k: v for k, v in self.__dict__.items() if k not in ("_slots", "_lock")}
        state["stats"] = {k: 0 for k in _STAT_KEYS}
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._slots = []
        self._lock = threading.Lock()

    def healthy(self) -> bool:
        """True when every worker answers a trivial check within the timeout."""
        # a pair the cheap rules cannot decide, so each worker runs math-verify
        job = {"kind": "pairs", "strings": ["\\sqrt{4}", "2"], "pairs": [(0, 1)]}
        res = self.run_jobs([dict(job) for _ in range(self.workers)])
        return all(r == [True] for r in res)

    # -- public checks ------------------------------------------------------
    def equal(self, a: str, b: str) -> bool:
        """``a`` and ``b`` are the same mathematical answer (``a`` is the gold)."""
        return self.equal_many([(a, b)])[0]

    def equal_many(self, pairs: list[tuple[str, str]]) -> list[bool]:
        """Batched :meth:`equal`: cheap rules here, the rest split over the pool."""
        if self._closed:
            raise RuntimeError("EquivalenceChecker is closed")
        out: list[bool | None] = []
        todo: list[int] = []
        for k, (a, b) in enumerate(pairs):
            if a is None or b is None:
                out.append(False)
                continue
            cheap = cheap_compare(a, b)
            if cheap:
                self.stats["string_matches"] += 1
            out.append(cheap)
            if cheap is None:
                todo.append(k)
        self.stats["calls"] += len(pairs)
        if todo:
            n_jobs = min(len(todo), self.workers * 4)
            jobs = []
            for part in range(n_jobs):
                idx = todo[part::n_jobs]
                strings: list[str] = []
                where: dict[str, int] = {}
                job_pairs = []
                for k in idx:
                    ij = []
                    for s in pairs[k]:
                        if s not in where:
                            where[s] = len(strings)
                            strings.append(s)
                        ij.append(where[s])
                    job_pairs.append(tuple(ij))
                jobs.append((idx, {"kind": "pairs", "strings": strings, "pairs": job_pairs}))
            results = self.run_jobs([j for _, j in jobs])
            for (idx, _), res in zip(jobs, results):
                for k, r in zip(idx, res):
                    out[k] = bool(r)
        return [bool(x) for x in out]

    # -- the dispatcher -----------------------------------------------------
    def run_jobs(self, jobs: list[dict], time_budget: float | None = None) -> list:
        """Run worker jobs (see :mod:`serl.rewards._worker`) over the pool.

        Returns one result per job.  A job whose worker is killed for a
        timeout is re-sent with the offending check marked bad.  A job the pool
        cannot finish raises :class:`RewardPoolError`; workers that keep dying
        at start raise :class:`WorkerStartError`.  ``time_budget``: seconds the
        batch may run once it has the pool; past it the workers are killed and
        :class:`OverBudget` is raised, so the next caller gets a fresh pool.
        """
        if not jobs:
            return []
        with self._lock:
            self.busy_since = time.monotonic()
            deadline = None if time_budget is None else self.busy_since + time_budget
            self._ensure_started()
            for job in jobs:
                job.setdefault("toxic", set())
                job.setdefault("bad_pairs", set())
                job.setdefault("strikes", {})
            self.stats["jobs"] += len(jobs)
            try:
                return self._dispatch(jobs, deadline)
            except BaseException:
                self._tear_down()
                raise
            finally:
                self.busy_since = None

    def _dispatch(self, jobs: list[dict], deadline: float | None = None) -> list:
        results: list = [None] * len(jobs)
        pending = deque(range(len(jobs)))
        busy: dict[int, Slot] = {}  # job index -> slot
        while pending or busy:
            if self._closed:
                raise RewardPoolError("the reward pool was shut down; no reward was computed")
            if deadline is not None and time.monotonic() > deadline:
                raise OverBudget(
                    f"scoring took longer than its budget of {deadline - (self.busy_since or 0.0):g} s; "
                    "no reward was computed"
                )
            for slot in self._slots:
                if slot.job is None and pending:
                    j = pending.popleft()
                    try:
                        slot.conn.send((j, jobs[j]))
                    except (OSError, ValueError):  # the worker is gone
                        pending.appendleft(j)
                        if slot.ready:
                            self._replace(slot, crashed=True)
                        else:
                            self._start_failed(slot, "its pipe closed before it was ready")
                        continue
                    slot.job = j
                    busy[j] = slot
            conns = {slot.conn: slot for slot in busy.values()}
            for conn in wait(list(conns), timeout=self._next_wakeup(busy)):
                slot = conns[conn]
                assert slot.job is not None  # a busy slot holds a job
                j = slot.job
                try:
                    msg = slot.conn.recv()
                except (EOFError, OSError):
                    busy.pop(j)
                    pending.appendleft(j)
                    if not slot.ready:
                        self._start_failed(slot)
                        continue
                    self._on_stuck(slot, jobs[j], crashed=True)
                    if jobs[j].get("_crashes", 0) > 2:
                        raise RewardPoolError(
                            "a reward worker died 3 times on the same job outside any check "
                            "(see stderr for its error); no reward was computed for it"
                        ) from None
                    continue
                if msg == READY:
                    slot.ready = True
                    self._start_failures = 0
                    continue
                task_id, result, error, counters = msg
                for k, v in counters.items():
                    if k == "soft_timeouts":
                        self.stats["timeouts"] += v
                    self.stats[k] = self.stats.get(k, 0) + v
                slot.job = None
                busy.pop(j)
                if error or task_id != j:
                    self.stats["crashes"] += 1
                    raise RewardPoolError(
                        f"a reward worker failed on a job: {error or 'reply out of order'}; "
                        "no reward was computed for it"
                    )
                results[j] = result
            now = time.monotonic()
            for j, slot in list(busy.items()):
                if not slot.ready and now - slot.started_at > self.start_timeout:
                    busy.pop(j)
                    pending.appendleft(j)
                    self._start_failed(slot, f"it was not ready after {self.start_timeout:g} s")
                    continue
                started = slot.progress[0]
                if started > 0 and now - started > self.timeout:
                    self._on_stuck(slot, jobs[j], crashed=False, seen_start=started)
                    busy.pop(j)
                    pending.appendleft(j)
        return results

    def _start_failed(self, slot: Slot, why: str | None = None) -> None:
        """A worker died before it was ready: restart it, or raise after too many in a row."""
        slot.kill()
        why = why or f"it exited with code {slot.proc.exitcode} before it was ready"
        self._start_failures += 1
        self.stats["start_failures"] += 1
        if self._start_failures >= self.max_start_failures:
            self._start_failures = 0
            raise WorkerStartError(
                f"reward worker processes failed to start {self.max_start_failures} times in a row "
                f"(last one: {why}); their own error is on stderr above. The workers do not "
                f're-run your __main__ script, so a missing `if __name__ == "__main__":` guard is '
                f"not the cause. Check that `{sys.executable} -c 'import math_verify'` works, and that "
                f"max_memory_mb={self.max_memory_mb} leaves room for math-verify."
            )
        self._restart(slot)

    def _next_wakeup(self, busy: dict) -> float:
        """Seconds until the earliest running check would pass its deadline."""
        wake = 0.05
        now = time.monotonic()
        for slot in busy.values():
            started = slot.progress[0]
            if started > 0:
                wake = min(wake, max(0.0, started + self.timeout - now) + 0.001)
        return wake

    def _on_stuck(self, slot: Slot, job: dict, crashed: bool, seen_start: float = 0.0) -> None:
        """Kill the worker, mark the check it was on as bad, start a new one."""
        slot.kill()
        started, kind, i, j = (slot.progress[k] for k in range(4))
        # Only blame the check if the worker was still on the same one we timed.
        if started > 0 and (crashed or started == seen_start):
            i, j = int(i), int(j)
            if kind == 1.0:  # parse
                job["toxic"].add(i)
            else:
                job["bad_pairs"].add((i, j))
                for k in (i, j):
                    job["strikes"][k] = job["strikes"].get(k, 0) + 1
                    if job["strikes"][k] >= 2:
                        job["toxic"].add(k)
            if crashed:
                self.stats["crashes"] += 1
            else:
                self.stats["timeouts"] += 1
                self.stats["hard_timeouts"] += 1
        elif crashed:
            self.stats["crashes"] += 1
            # A crash outside any check: poison nothing; after 3 the job is
            # given up (result None) so a bad job cannot loop forever.
            job["_crashes"] = job.get("_crashes", 0) + 1
        self._replace(slot, crashed=False, already_killed=True)

    def _replace(self, slot: Slot, crashed: bool, already_killed: bool = False) -> None:
        if not already_killed:
            slot.kill()
            if crashed:
                self.stats["crashes"] += 1
        self._restart(slot)

    def _restart(self, slot: Slot) -> None:
        if self._closed:  # terminate() ran meanwhile: start nothing that would outlive the server
            raise RewardPoolError("the reward pool was shut down; no reward was computed")
        slot.start()
        self.stats["restarts"] += 1
