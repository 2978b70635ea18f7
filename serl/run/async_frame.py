"""The step frame with behaviour log-probs, and the asynchronous actor-learner (docs/async.md).

``--importance_sampling_correction`` or ``--async_train`` put this frame in place of
``serl.run.step.SyncFrame``. It records what the generator samples while the recipe collects
(``RecordingGenerator``: the policy version and, for the correction, each token's log-prob),
and attaches it to the batch: ``TrainBatch.behaviour_logprobs`` for the learner's truncated
importance sampling (``serl.algos.tis``), and the version of each sequence for the lag.

With ``--async_train`` the collect of step t+1 runs in a background thread while step t
updates. The order, per step t (``AsyncFrame.step``):

1. take the batch collected ahead for t (the first step, or a resume without one, collects now);
   drop sequences more than ``--max_staleness`` versions old (``async/dropped_stale``);
2. close the learner gate, start collect(t+1) in the thread (the generator serves version v);
3. ``learner.step(batch_t)`` here: version v+1; open the gate. A learner call from the collect
   thread (a log-prob pass, SPIRAL's switch back to the current weights) waits for the gate, so it
   always sees v+1, never a half-updated policy;
4. wait for collect(t+1) to finish, then sync the weights: one collect at a time runs, and the
   generator's weights never change under a collect;
5. ``after_update(t)``, with the step-local state that collect(t) returned (collect(t+1) has already run).

Collect alone touches the recipe's RNG, its data and the generator; the learner runs only in the
main thread. A checkpoint after step t keeps the batch collected for t+1 and the run state after
that collect, so a resume continues exactly (``state_dict``).
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass, field

import torch

from serl.run.checkpoint import fault_point
from serl.engines.base import TrainBatch
from serl.run.step import collect, finish, nothing_to_train, start_times, update, use_times

log = logging.getLogger("serl")


KEEP_VERSIONS = 8  # a synchronous run's log-probs kept this many versions back (SeRL's carried groups)


def _key(prompt_ids, token_ids) -> int:
    return hash((tuple(prompt_ids), tuple(token_ids)))  # ints only: the same in every process


class RecordingGenerator:
    """The run's generator; while ``recording``, each sampled completion's policy version (and, with
    ``logprobs``, its tokens' log-probs at ``temperature``, the learner's) is kept by its ids."""

    def __init__(self, generator, logprobs: bool, temperature: float = 1.0):
        self.inner, self.logprobs, self.temperature = generator, logprobs, temperature
        self.recording, self.version = False, 0
        self.versions: dict[int, int] = {}          # every sequence sampled in training, by key
        self.lps: dict[int, list[float]] = {}       # their log-probs (pruned once stale)

    def generate(self, prompts, n, sampling):
        if self.recording and self.logprobs and not sampling.greedy:
            sampling = dataclasses.replace(sampling, logprobs=True, logprob_temperature=self.temperature)
        groups = self.inner.generate(prompts, n, sampling)
        if self.recording:
            for group in groups:
                for c in group:
                    k = _key(c.prompt_ids, c.token_ids)
                    self.versions[k] = self.version
                    if self.logprobs and c.logprobs is not None:
                        if len(c.logprobs) != len(c.token_ids):
                            raise RuntimeError(f"the generator returned {len(c.logprobs)} log-probs for "
                                               f"{len(c.token_ids)} tokens")
                        self.lps[k] = c.logprobs
        return groups

    def prune(self, oldest: int) -> None:
        """Forget the log-probs of sequences sampled before version ``oldest`` (their versions stay)."""
        self.lps = {k: v for k, v in self.lps.items() if self.versions[k] >= oldest}

    def __getattr__(self, name):  # load_weights, state_dict, calls, close, ...
        return getattr(self.inner, name)


class GatedLearner:
    """The learner as the recipe sees it under --async_train: a call from another thread than the
    one that made it waits while the gate is closed (an update is running)."""

    def __init__(self, learner):
        object.__setattr__(self, "_learner", learner)
        object.__setattr__(self, "_owner", threading.current_thread())
        object.__setattr__(self, "_open", threading.Event())
        self._open.set()

    def __getattr__(self, name):
        attr = getattr(self._learner, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):  # decided at call time: a bound method kept by a recipe is gated too
            if threading.current_thread() is not self._owner:
                self._open.wait()
            return attr(*args, **kwargs)
        return call

    def __setattr__(self, name, value):
        setattr(self._learner, name, value)


@dataclass
class Collected:
    step: int
    batch: TrainBatch | None
    metrics: dict
    times: dict
    versions: list[int | None] = field(default_factory=list)  # per sequence; None: not sampled
    state: object = None                                      # what collect hands its after_update (its local)


def stale_filter(batch: TrainBatch | None, versions: list, now: int, max_staleness: int | None):
    """``batch`` without the sequences more than ``max_staleness`` versions behind ``now`` (None: keep
    all), and the lag metrics of the sequences kept (what is trained). Pair objectives (DPO) keep
    everything: they are off-policy by design."""
    if batch is None:
        return None, {}
    drop = max_staleness is not None and batch.pairs is None
    keep = [i for i, v in enumerate(versions) if v is None or not drop or now - v <= max_staleness]
    lags = [now - versions[i] for i in keep if versions[i] is not None]
    m = {"async/lag_mean": sum(lags) / len(lags) if lags else 0.0, "async/lag_max": float(max(lags, default=0)),
         "async/unsampled": float(len(keep) - len(lags))}  # not the generator's (SPIN's human answers)
    if not drop:
        return batch, m
    m["async/dropped_stale"] = float(len(versions) - len(keep))
    if len(keep) == len(versions):
        return batch, m
    if not keep:
        return None, m
    return batch.subset(keep), m


class AsyncFrame:
    """One training step (``step``) for ``recipe``, with behaviour log-probs and, with ``plan.async_train``,
    the next collect overlapped with this update. The parts shared with the synchronous frame (the update,
    the empty step, the step's metrics, the clock) are ``serl.run.step``'s."""

    def __init__(self, recipe, generator: RecordingGenerator, learner, plan, steps: int):
        self.recipe, self.gen, self.learner = recipe, generator, learner  # learner: the real one
        self.asynchronous, self.steps = plan.async_train, steps
        self.max_staleness = plan.max_staleness if plan.async_train else None
        self.gate = recipe.learner._open if isinstance(recipe.learner, GatedLearner) else None
        self.version = 0               # policy updates applied
        self.ahead: Collected | None = None

    def _collect(self, step: int, version: int) -> Collected:
        """collect(step) with the generator serving policy ``version``, timed on a fresh clock."""
        times = start_times()
        self.gen.recording, self.gen.version = True, version
        try:
            batch, metrics, local = collect(self.recipe, step)
        finally:
            self.gen.recording = False
        versions = []
        if batch is not None:
            keys = [_key(p, t) for p, t in zip(batch.prompt_ids, batch.response_ids)]
            versions = [self.gen.versions.get(k) for k in keys]
            if self.gen.logprobs:  # sampled, but its log-probs are gone (pruned) or never came: weight 1
                metrics["async/behaviour_missing"] = float(sum(k in self.gen.versions and k not in self.gen.lps
                                                               for k in keys))
                nan = float("nan")
                batch.behaviour_logprobs = [torch.tensor(self.gen.lps.get(k, [nan] * len(t)), dtype=torch.float32)
                                            for k, t in zip(keys, batch.response_ids)]
        return Collected(step, batch, metrics, times, versions, local)

    def _start_ahead(self, step: int):
        """collect(step + 1) in a thread, with the weights served now; (thread, its result box)."""
        if self.gate is not None:
            self.gate.clear()
        version, box = self.version, {}

        def ahead():
            try:
                box["got"] = self._collect(step + 1, version)
            except BaseException as e:  # handed to the main thread below
                box["error"] = e
        worker = threading.Thread(target=ahead, name=f"serl-collect-{step + 1}", daemon=True)
        worker.start()
        return worker, box

    def step(self, step: int) -> dict[str, float]:
        r = self.recipe
        fault_point("generate", step)
        t0 = time.perf_counter()
        if self.ahead is not None and self.ahead.step == step:
            got, self.ahead = self.ahead, None
        else:
            got = self._collect(step, self.version)
        batch, metrics = got.batch, got.metrics
        if batch is not None:
            batch, lag = stale_filter(batch, got.versions, self.version, self.max_staleness)
            metrics.update(lag)
        worker, box = self._start_ahead(step) if self.asynchronous and step < self.steps else (None, {})
        try:
            if batch is not None:
                update(r, self.learner, batch, metrics, step, got.times)
                self.version += 1
        finally:
            if worker is not None:
                if self.gate is not None:
                    self.gate.set()
                t2 = time.perf_counter()
                worker.join()
                got.times["collect_wait"] = time.perf_counter() - t2  # the next collect outlasted the update
        if "error" in box:
            raise box["error"]
        self.ahead = box.get("got")
        use_times(got.times)  # the sync and after_update(step) count toward this step
        if batch is not None:
            r.sync_weights()
        else:
            nothing_to_train(step, "every sample was filtered out, masked or stale")
        r.after_update(step, metrics, batch is not None, _local(got.state))
        if self.gen.logprobs:  # older samples are dropped as stale; a synchronous run keeps KEEP_VERSIONS
            self.gen.prune(self.version - (self.max_staleness or KEEP_VERSIONS) - 1)
        got.times["step"] = time.perf_counter() - t0
        return finish(metrics, got.times)

    # ---- checkpointed: the version count, what was sampled, the collect done ahead ----------
    def state_dict(self) -> dict:
        a = self.ahead
        ahead = None if a is None else {
            "step": a.step, "batch": None if a.batch is None else dataclasses.asdict(a.batch),
            "metrics": a.metrics, "times": a.times, "versions": a.versions, "state": a.state}
        return {"version": self.version, "versions": dict(self.gen.versions), "lps": dict(self.gen.lps),
                "ahead": ahead}

    def load_state_dict(self, state: dict) -> None:
        self.version = int(state["version"])
        self.gen.versions, self.gen.lps = dict(state["versions"]), dict(state["lps"])
        a = state.get("ahead")
        self.ahead = None if a is None else Collected(
            a["step"], None if a["batch"] is None else TrainBatch(**a["batch"]), a["metrics"], a["times"],
            a["versions"], a["state"])
        if self.ahead is not None and not self.asynchronous:
            log.info("the checkpoint holds the batch an --async_train run collected for step %d; it is trained "
                     "first", self.ahead.step)


def wrap_engines(cfg, plan, generator, learner):
    """The generator and learner a recipe is given when the frame is in use (``plan.framed``; before
    the recipe is built, so what it hands on is wrapped too): the generator records what it samples,
    and under --async_train the learner is gated (the frame itself calls the real one)."""
    temperature = float(plan.learner.get("temperature", 1.0))  # the learner scores at this temperature
    if plan.is_cap and temperature != 1.0 and getattr(generator, "raw_logprobs_only", False):
        from serl.errors import ConfigError

        raise ConfigError(f"importance_sampling_correction: recipe '{cfg.recipe}' scores tokens at temperature "
                          f"{temperature:g}, and the vllm generator returns log-probs at temperature 1 only; "
                          f"use --generator hf, or leave the correction out")
    gen = RecordingGenerator(generator, plan.is_cap > 0, temperature)
    return gen, (GatedLearner(learner) if plan.async_train else learner)


def _local(state):
    """A checkpoint before step-local state came back from collect kept a dict of the recipe's
    attributes (``step_state``); the recipes that had one read the same dict as their local."""
    return state if state != {} else None
