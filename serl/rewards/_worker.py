"""Code that runs inside an equivalence worker process.

A worker first sends ``"ready"``, then receives jobs over a pipe and answers each
with one message.  Before
every expensive unit (one math-verify ``parse`` or one ``verify``) it writes
``(start time, kind, i, j)`` into a small shared array; the parent reads it and
kills the worker when a unit runs past the hard timeout, so a check that hangs
inside C code (where no signal can interrupt it) still ends on time.  A softer
``SIGALRM`` timer (this is the worker's main thread, so signals work) stops
ordinary pure-Python hangs earlier without losing the process.

Jobs (plain dicts, see ``EquivalenceChecker``):

* ``{"kind": "pairs", "strings": [...], "pairs": [(i, j), ...]}`` ->
  ``[bool, ...]``: ``verify(gold=strings[i], target=strings[j])``.
* ``{"kind": "group", "strings": [...], "label": k | None}`` -> cluster the
  strings other than ``label`` (in order, each against the representatives of
  the clusters found so far) and, if ``label`` is set, compare each to it.

Both carry ``bad_pairs`` (pairs that timed out: unequal) and ``toxic`` (strings
that timed out twice or whose parse timed out: compared by the cheap rules only).
"""

from __future__ import annotations

import logging
import math
import signal
import time
from collections import OrderedDict

import math_verify  # noqa: F401  (imported here so the forkserver preloads it)
from math_verify import LatexExtractionConfig, parse, verify

from serl.rewards import safety
from serl.rewards.cluster import cluster
from serl.rewards.normalize import cheap_compare

PARSE, VERIFY = 1.0, 2.0
_LATEX_ONLY = [LatexExtractionConfig()]


_MAX_NODES = 2000
_MAX_EXPONENT = 10**5


def _magnitude(e) -> float:
    """Rough upper bound on log10|e| for a number-only tree; inf when unbounded."""
    import sympy

    if e.is_Integer or e.is_Rational:
        return math.log10(abs(int(e.p)) + 1) if e.is_Integer else 1.0
    if isinstance(e, sympy.Pow) and e.args[0].is_number and e.args[1].is_number:
        base, exp = _magnitude(e.args[0]), _magnitude(e.args[1])
        if exp > 6:
            return math.inf
        return base * (10**exp)
    return 0.0


def too_big(values) -> bool:
    """Parsed answers that would make sympy compute astronomically large numbers
    (``9^{9^{9^9}}``, ``100000!``) or that have a huge tree: such answers are
    compared by the cheap rules only (cheaper than waiting for a timeout)."""
    import sympy

    for v in values:
        if not isinstance(v, sympy.Basic):
            continue
        for n, node in enumerate(sympy.preorder_traversal(v)):
            if n > _MAX_NODES:
                return True
            if isinstance(node, sympy.Pow) and node.args[0].is_number and node.args[1].is_number:
                if _magnitude(node.args[1]) > math.log10(_MAX_EXPONENT) and _magnitude(node.args[0]) > 0.31:
                    return True
            if isinstance(node, sympy.factorial) and node.args[0].is_number:
                if _magnitude(node.args[0]) > 4:
                    return True
    return False


class _SoftTimeout(BaseException):
    """Raised by SIGALRM; a BaseException so math-verify's ``except Exception``
    does not swallow it."""


def _on_alarm(signum, frame):
    raise _SoftTimeout()


class Worker:
    def __init__(self, progress, soft_timeout: float | None, max_chars: int):
        self.progress = progress
        self.soft = soft_timeout
        self.max_chars = max_chars
        self.cache: OrderedDict[str, object] = OrderedDict()
        self.counters = {
            "verify_calls": 0,
            "parse_calls": 0,
            "soft_timeouts": 0,
            "skipped_long": 0,
            "too_big": 0,
            "check_errors": 0,
        }

    # -- timed units --------------------------------------------------------
    def _unit(self, kind: float, i: int, j: int, fn):
        """Run ``fn`` as one timed unit; returns (ok, value)."""
        p = self.progress
        p[1], p[2], p[3] = kind, float(i), float(j)
        p[0] = time.monotonic()
        if self.soft:
            signal.setitimer(signal.ITIMER_REAL, self.soft)
        try:
            return True, fn()
        except _SoftTimeout:
            self.counters["soft_timeouts"] += 1
            return False, None
        except Exception:  # math-verify failed on this input: the check fails, counted
            self.counters["check_errors"] += 1
            return False, None
        finally:
            if self.soft:
                signal.setitimer(signal.ITIMER_REAL, 0)
            p[0] = 0.0

    def parsed(self, s: str, i: int):
        """math-verify parse of one answer (cached); None if it timed out."""
        if s in self.cache:
            self.cache.move_to_end(s)
            return self.cache[s]
        self.counters["parse_calls"] += 1
        ok, value = self._unit(
            PARSE,
            i,
            -1,
            lambda: parse("\\boxed{" + s + "}", extraction_config=_LATEX_ONLY, parsing_timeout=None),
        )
        value = value if ok else None
        if value is not None:
            ok, big = self._unit(PARSE, i, -1, lambda: too_big(value))
            if not ok or big:
                self.counters["too_big"] += 1
                value = None
        self.cache[s] = value
        if len(self.cache) > 4096:
            self.cache.popitem(last=False)
        return value

    def equal(self, job: dict, i: int, j: int) -> bool:
        strings = job["strings"]
        a, b = strings[i], strings[j]
        cheap = cheap_compare(a, b)
        if cheap is not None:
            return cheap
        if i in job["toxic"] or j in job["toxic"] or (i, j) in job["bad_pairs"]:
            return False
        if len(a) > self.max_chars or len(b) > self.max_chars:
            self.counters["skipped_long"] += 1
            return False
        pa = self.parsed(a, i)
        if pa is None:
            job["toxic"].add(i)
            return False
        pb = self.parsed(b, j)
        if pb is None:
            job["toxic"].add(j)
            return False
        self.counters["verify_calls"] += 1
        ok, value = self._unit(VERIFY, i, j, lambda: verify(pa, pb, timeout_seconds=None))
        if not ok:
            job["bad_pairs"].add((i, j))
            strikes = job.setdefault("strikes", {})
            for k in (i, j):
                strikes[k] = strikes.get(k, 0) + 1
                if strikes[k] >= 2:
                    job["toxic"].add(k)
            return False
        return bool(value)

    # -- jobs ---------------------------------------------------------------
    def run(self, job: dict):
        job.setdefault("toxic", set())
        job.setdefault("bad_pairs", set())
        if job["kind"] == "pairs":
            return [self.equal(job, i, j) for i, j in job["pairs"]]
        if job["kind"] == "group":
            return cluster(job, self.equal)
        raise ValueError(f"unknown job kind {job['kind']!r}")


def _warm_up() -> None:
    """Run each parser path once at import: in the forkserver this happens once
    and every forked worker inherits the loaded grammar and warm caches."""
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    for a, b in (("\\frac{\\sqrt{2}}{2}", "\\sqrt{2}/2"), ("[0,1)", "(0,1]"), ("x^2+1", "\\pi")):
        verify(
            parse("\\boxed{" + a + "}", _LATEX_ONLY, parsing_timeout=None),
            parse("\\boxed{" + b + "}", _LATEX_ONLY, parsing_timeout=None),
            timeout_seconds=None,
        )


_warm_up()


def worker_main(conn, progress, soft_timeout, max_chars, max_memory_mb) -> None:
    """Entry point of a worker process."""
    for name in ("math_verify", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    safety.install_guards(max_memory_mb)
    worker = Worker(progress, soft_timeout, max_chars)
    conn.send("ready")  # the parent counts a death before this as a start failure
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        task_id, job = msg
        for k in worker.counters:
            worker.counters[k] = 0
        before = safety.blocked_count
        try:
            result, error = worker.run(job), None
        except Exception as e:  # outside any check (a bug): the parent raises
            result, error = None, f"{type(e).__name__}: {e}"[:500]
        counters = dict(worker.counters, blocked=safety.blocked_count - before)
        conn.send((task_id, result, error, counters))
