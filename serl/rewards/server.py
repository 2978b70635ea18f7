"""``serl serve-reward``: OpenRLHF's remote reward protocol over HTTP.

Request (POST ``/get_reward``, or ``/``)::

    {"query": [prompt+response, ...], "prompts": [prompt, ...], "labels": [label|null, ...]}

Reply::

    {"rewards": [float, ...], "scores": [float, ...],
     "extra_logs": {"agreement": [...], "n_clusters": [...], "tie": [...],
                    "no_answer": [...], "group_n": [...], "partial_group": [...],
                    "rule": [...]}}

One entry per sample everywhere.  The response text is the query with the
prompt removed (answers are never taken from the prompt): the query must start
with the prompt, else the text after the prompt's first occurrence is used,
else the text after the longest common prefix.

Grouping for the majority vote (samples are grouped by prompt text):

* ``--group_size 0`` (default): per request.  The samples of one request that
  share a prompt form one group and are voted at once.  Use it when a client
  sends whole groups (e.g. the serl trainer, or OpenRLHF with one server call
  per batch).
* ``--group_size N``: samples of a prompt are collected across requests until N
  have arrived, then the group is voted and every waiting request gets its
  rewards.  This is what OpenRLHF 0.11 needs (it sends one sample per request,
  ``n_samples_per_prompt`` of them per prompt): run with
  ``--group_size <n_samples_per_prompt>``.  A group still incomplete after
  ``--group_wait`` seconds is voted with what it has (``partial_group`` = 1).

With ``--mode auto`` a sample that has a label gets the rule reward at once (no
grouping needed); ``--mode rule`` requires labels.  A label is a string, a
finite number or null (``true``, ``NaN`` and ``Infinity`` are refused).

An empty answer (``\\boxed{\\text{}}``, ``\\boxed{.}``, ``\\boxed{$$}``: nothing
but presentation) is no answer, as in training: reward 0, ``no_answer`` = 1,
never part of a majority (:mod:`serl.rewards.vote`).

The server binds 127.0.0.1 unless ``--host`` says otherwise, refuses bodies over
``--max_request_mb``, answers malformed requests (bad JSON, JSON nested too
deeply, a garbage request line, a wrong field) with 4xx and a JSON message
naming what is wrong, and runs every math-verify check in the checker's process
pool (never in the handler threads).  A request must arrive in full within
``--request_timeout`` seconds of its first byte, else it gets ``408`` and its
connection is closed: clients that trickle bytes cannot hold the connection
slots (:mod:`serl.rewards.httpd`).

Why the standard library's threaded HTTP server, with production settings,
and not an ASGI stack (uvicorn + starlette): the protocol is one JSON POST, the
work per request is a dictionary lookup and, once per group, one job for the
worker pool; a waiting request simply blocks its thread on an event until its
group is voted.  That needs no new dependency in a core command, and measured
on a 2-core machine it serves well over the 500 requests/s target
(``bench/reward_server_load.py``, numbers in ``bench/README.md``).  What made the
plain ``ThreadingHTTPServer`` slow was its settings, all changed here:

* listen backlog 5 -> ``--backlog`` (1024): with dozens of clients connecting at
  once the kernel dropped SYNs past 5 queued connections, and each client
  retried only after the 1-second SYN timeout;
* HTTP/1.1 keep-alive (a client may reuse its connection), and status line,
  headers and body leave in one write with ``TCP_NODELAY`` set, so a small reply
  never waits for a delayed ACK (Nagle);
* one thread per open connection, at most ``--max_connections``; past that a
  connection gets ``503`` at once instead of an unbounded thread.  Threads are
  per connection, not a fixed pool, on purpose: a request waiting for its group
  holds its thread, and a fixed pool smaller than the clients could deadlock
  with every thread waiting for samples queued behind it;
* an idle or stalled connection is closed after ``--idle_timeout`` seconds, and
  a request slower than ``--request_timeout`` in all gets ``408`` and is closed;
  idle connections give way to new ones (:class:`serl.rewards.httpd.RewardHTTPServer`).

Fair scoring (:mod:`serl.rewards.lanes`): small batches go to a fast pool with a
1-second budget, big ones (or ones that overrun it) to a slow pool, so a request
inside every limit that needs a minute of math-verify never delays a small one.
"""

from __future__ import annotations

import threading
import time

from serl.rewards.equivalence import OverBudget
from serl.rewards.extract import normalize_label
from serl.rewards.httpd import BadRequest, RewardHTTPServer, make_handler
from serl.rewards.request import TooLarge, parse_request, response_text  # noqa: F401  (response_text: API)
from serl.rewards.vote import MODES, GroupTooLarge, score_groups


class _Sample:
    __slots__ = ("text", "prompt", "label", "done", "result")

    def __init__(self, text, prompt, label):
        self.text, self.prompt, self.label = text, prompt, label
        self.done = threading.Event()
        self.result: dict | None = None


class RewardService:
    """Scoring and grouping behind the HTTP handler (usable without HTTP)."""

    def __init__(
        self,
        checker,
        mode="majority",
        fallback="number",
        group_size=0,
        group_wait=60.0,
        *,
        max_samples=4096,
        max_distinct=256,
        max_score_seconds=60.0,
        max_query_chars=256 * 1024,
        max_waiting=512,
    ):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        self.checker, self.mode, self.fallback = checker, mode, fallback
        self.group_size, self.group_wait = int(group_size), float(group_wait)
        self.max_samples, self.max_distinct = int(max_samples), int(max_distinct)
        self.max_score_seconds = float(max_score_seconds)
        self.max_query_chars = max_query_chars
        self.max_waiting = max(int(max_waiting), self.group_size)
        self._waiting = 0  # samples in incomplete groups (each holds a connection)
        if self.group_size > self.max_distinct:
            raise ValueError(
                f"group_size {self.group_size} > max_distinct {self.max_distinct}: a full group could be refused"
            )
        self._buckets: dict[str, list[_Sample]] = {}
        self._lock = threading.Lock()
        self._scoring: dict[int, float] = {}  # id of a _score call -> when it began (waiting for the pool too)
        self.counts = {
            "requests": 0,
            "samples": 0,
            "groups": 0,
            "partial_groups": 0,
            "ties": 0,
            "refused_too_large": 0,
            "over_budget": 0,
            "groups_voted_early": 0,
        }
        self.connections = None  # set by make_server: () -> counts of open and idle connections

    def health(self) -> dict:
        """``ok`` is false while some scoring (its wait for the pool included) has run
        longer than ``max_score_seconds``: the pool is stuck or overloaded."""
        now = time.monotonic()
        with self._lock:
            ages = [now - t for t in self._scoring.values()]
            counts = dict(self.counts)
        busy = self.checker.busy_since if hasattr(self.checker, "busy_since") else None
        oldest = max(ages, default=0.0)
        lanes = self.checker.health() if callable(getattr(self.checker, "health", None)) else None
        out = {
            "ok": oldest <= self.max_score_seconds and (lanes is None or lanes["ok"]),
            "scoring": len(ages),
            "oldest_scoring_s": round(oldest, 3),
            "pool_busy_s": None if busy is None else round(now - busy, 3),
            "max_score_seconds": self.max_score_seconds,
            "waiting_samples": self._waiting,
            "counts": counts,
            "checker": dict(getattr(self.checker, "stats", {})),
        }
        if lanes is not None:
            out["lanes"] = lanes
        if self.connections is not None:
            out["connections"] = self.connections()
        return out

    def answer(self, body: bytes) -> dict:
        """One POST body -> its reply; the size limits are checked while it is parsed."""
        try:
            parsed = parse_request(body, self.max_samples, self.max_query_chars)
        except TooLarge:
            with self._lock:
                self.counts["refused_too_large"] += 1
            raise
        return self.handle(*parsed)

    def _score(self, groups: list[list[_Sample]], partial: bool = False) -> None:
        labels = [g[0].label for g in groups]  # rule groups are single samples
        mode = "majority" if self.mode == "majority" else "auto"
        key = object()
        with self._lock:
            self._scoring[id(key)] = time.monotonic()
        try:
            scores = score_groups(
                [[s.text for s in g] for g in groups],
                labels,
                self.checker,
                mode,
                self.fallback,
                max_distinct=self.max_distinct,
                time_budget=self.max_score_seconds,
            )
        except BaseException:
            for g in groups:  # wake every waiting request; they report the failure
                for s in g:
                    s.done.set()
            raise
        finally:
            with self._lock:
                del self._scoring[id(key)]
        with self._lock:
            self.counts["groups"] += len(groups)
            self.counts["ties"] += sum(gs.tie for gs in scores)
            self.counts["partial_groups"] += len(groups) if partial else 0
        for g, gs in zip(groups, scores):
            for k, s in enumerate(g):
                s.result = {
                    "reward": gs.rewards[k],
                    "agreement": gs.agreement,
                    "n_clusters": gs.n_clusters,
                    "tie": int(gs.tie),
                    "no_answer": int(gs.answers[k] is None),
                    "group_n": len(g),
                    "partial_group": int(partial),
                    "rule": int(gs.source == "rule"),
                }
                s.done.set()

    def handle(self, queries, prompts, labels) -> dict:
        samples: list = []
        for q, p, lab in zip(queries, prompts, labels):
            lab = normalize_label(lab) if self.mode != "majority" else None
            if self.mode == "rule" and lab is None:
                raise BadRequest(f"--mode rule needs a label for every sample (sample {len(samples)} has none)")
            samples.append(_Sample(response_text(q, p), p, lab))
        if len(samples) > self.max_samples:
            with self._lock:
                self.counts["refused_too_large"] += 1
            raise BadRequest(
                f"request has {len(samples)} samples; this server scores at most {self.max_samples} "
                f"per request (--max_samples): split it into smaller requests",
                413,
            )
        with self._lock:
            self.counts["requests"] += 1
            self.counts["samples"] += len(samples)
        ready: list[list[_Sample]] = [[s] for s in samples if s.label is not None]
        voting = [s for s in samples if s.label is None]
        if self.group_size <= 0:
            by_prompt: dict[str, list[_Sample]] = {}
            for s in voting:
                by_prompt.setdefault(s.prompt, []).append(s)
            ready.extend(by_prompt.values())
        else:
            early: list[list[_Sample]] = []
            with self._lock:
                for s in voting:
                    bucket = self._buckets.setdefault(s.prompt, [])
                    bucket.append(s)
                    self._waiting += 1
                    if len(bucket) >= self.group_size:
                        ready.append(self._buckets.pop(s.prompt))
                        self._waiting -= len(ready[-1])
                # Each waiting sample holds a connection: past the bound, the oldest incomplete
                # groups are voted now (partial), so requests for prompts whose group never
                # fills cannot take every slot until --group_wait.
                while self._waiting > self.max_waiting and self._buckets:
                    oldest = self._buckets.pop(next(iter(self._buckets)))
                    self._waiting -= len(oldest)
                    early.append(oldest)
                self.counts["groups_voted_early"] += len(early)
            if early:
                try:
                    self._score(early, partial=True)
                except Exception:  # their requests (woken) answer 500; this one goes on
                    pass
        if ready:
            try:
                self._score(ready)
            except GroupTooLarge as e:
                with self._lock:
                    self.counts["refused_too_large"] += 1
                raise BadRequest(
                    f"{e} per prompt (--max_distinct); a vote over k distinct answers costs up "
                    f"to k^2/2 checks: send fewer samples per prompt",
                    413,
                ) from None
            except OverBudget:
                with self._lock:
                    self.counts["over_budget"] += 1
                raise BadRequest(
                    f"scoring this request took over {self.max_score_seconds:g} s "
                    f"(--max_score_seconds) and was stopped so other clients are served; "
                    f"send fewer or simpler answers per request",
                    503,
                ) from None
        deadline = time.monotonic() + self.group_wait
        for s in samples:
            if not s.done.wait(max(0.0, deadline - time.monotonic())):
                self._flush(s)
                s.done.wait(self.group_wait)
            if s.result is None:
                raise BadRequest("scoring failed for a group this request belongs to", 500)
        logs_keys = ("agreement", "n_clusters", "tie", "no_answer", "group_n", "partial_group", "rule")
        rewards = [s.result["reward"] for s in samples]
        return {
            "rewards": rewards,
            "scores": list(rewards),
            "extra_logs": {k: [s.result[k] for s in samples] for k in logs_keys},
        }

    def _flush(self, sample: _Sample) -> None:
        """Vote now on the incomplete group that holds ``sample``."""
        with self._lock:
            bucket = self._buckets.get(sample.prompt)
            if bucket is None or sample not in bucket:
                return  # someone else completed or flushed it
            self._buckets.pop(sample.prompt)
            self._waiting -= len(bucket)
        self._score([bucket], partial=True)


def make_server(
    service: RewardService,
    host="127.0.0.1",
    port=0,
    max_request_mb=8.0,
    *,
    backlog=1024,
    max_connections=1024,
    idle_timeout=60.0,
    request_timeout=30.0,
    max_idle_per_client=128,
) -> RewardHTTPServer:
    """A ready (not yet serving) server; ``server.server_address`` has the port."""
    handler = make_handler(service.answer, service.health, int(max_request_mb * 2**20), idle_timeout, request_timeout)
    server = RewardHTTPServer(
        (host, port), handler, backlog=backlog, max_connections=max_connections, max_idle_per_client=max_idle_per_client
    )
    service.connections = server.open_connections
    return server
