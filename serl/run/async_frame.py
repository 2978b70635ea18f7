"""How the loop collects with behaviour log-probs, and the asynchronous actor-learner (docs/async.md).

``--importance_sampling_correction`` or ``--async_train`` (``plan.framed``) make the run loop
(``serl.run.loop.Loop``) collect through ``Overlap``. The generator records what it samples while
the recipe collects (``RecordingGenerator``: the policy version and, for the correction, each
token's log-prob), and ``Overlap`` attaches it to the batch: ``TrainBatch.behaviour_logprobs`` for
the learner's truncated importance sampling (``serl.algos.tis``), and the version of each sequence
for the lag.

With ``--async_train`` the collect of step t+1 runs in a background thread while step t
updates. The order, per step t (``Loop.train``):

1. take the batch collected ahead for t (the first step, or a resume without one, collects now);
   drop sequences more than ``--max_staleness`` versions old (``async/dropped_stale``);
2. close the learner gate, start collect(t+1) in the thread (the generator serves version v);
3. ``learner.step(batch_t)`` in the main thread: version v+1; open the gate. A learner call from the
   collect thread (a log-prob pass, SPIRAL's switch back to the current weights) waits for the gate,
   so it always sees v+1, never a half-updated policy;
4. wait for collect(t+1) to finish, then sync the weights: one collect at a time runs, and the
   generator's weights never change under a collect;
5. ``after_update(t)``, with the step-local state that collect(t) returned (collect(t+1) has already run).

Collect alone touches the recipe's RNG, its data and the generator; the learner updates only in the
main thread. A checkpoint after step t keeps the batch collected for t+1 and the run state after
that collect, so a resume continues exactly (``state_dict``).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from serl.engines.base import TrainBatch
from serl.run.state import generator_state, load_generator_state
from serl.run.step import Collected, start_times

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
        self.versions: dict[int, int] = {}  # every sequence sampled in training, by key
        self.lps: dict[int, list[float]] = {}  # their log-probs (pruned once stale)

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
                            raise RuntimeError(
                                f"the generator returned {len(c.logprobs)} log-probs for {len(c.token_ids)} tokens"
                            )
                        self.lps[k] = c.logprobs
        return groups

    def prune(self, oldest: int) -> None:
        """Forget the log-probs of sequences sampled before version ``oldest`` (their versions stay)."""
        self.lps = {k: v for k, v in self.lps.items() if self.versions[k] >= oldest}

    def load_weights(self, named_tensors) -> None:
        self.inner.load_weights(named_tensors)

    def state_dict(self) -> dict:
        return generator_state(self.inner)

    def load_state_dict(self, state: dict) -> None:
        load_generator_state(self.inner, state)

    def close(self) -> None:
        self.inner.close()


class GatedLearner:
    """The learner as the recipe sees it under --async_train: a call from another thread than the
    one that made it waits while ``gate`` is closed (an update is running)."""

    def __init__(self, learner):
        self.inner, self.owner, self.gate = learner, threading.current_thread(), threading.Event()
        self.gate.set()

    def _wait(self) -> None:
        if threading.current_thread() is not self.owner:
            self.gate.wait()

    def logprobs(self, *args, **kwargs):
        self._wait()
        return self.inner.logprobs(*args, **kwargs)

    def step(self, batch):
        self._wait()
        return self.inner.step(batch)

    def named_weights(self):
        self._wait()
        return self.inner.named_weights()

    def sync_ref(self) -> None:
        self._wait()
        self.inner.sync_ref()

    def save(self, path: str, state: bool = True) -> None:
        self._wait()
        self.inner.save(path, state=state)

    def load(self, path: str) -> None:
        self._wait()
        self.inner.load(path)

    def export_hf(self, path: str) -> None:
        self._wait()
        self.inner.export_hf(path)


@dataclass
class Taken:
    """A collect as the loop trains it: the recipe's ``Collected``, the step it was for, its clock and
    the policy version of each sequence (None: not sampled by the generator)."""

    step: int
    got: Collected
    times: dict
    versions: list[int | None] = field(default_factory=list)


def stale_filter(batch: TrainBatch | None, versions: list, now: int, max_staleness: int | None):
    """``batch`` without the sequences more than ``max_staleness`` versions behind ``now`` (None: keep
    all), and the lag metrics of the sequences kept (what is trained). Pair objectives (DPO) keep
    everything: they are off-policy by design."""
    if batch is None:
        return None, {}
    drop = max_staleness is not None and batch.pairs is None
    keep = [i for i, v in enumerate(versions) if v is None or not drop or now - v <= max_staleness]
    lags = [now - versions[i] for i in keep if versions[i] is not None]
    m = {
        "async/lag_mean": sum(lags) / len(lags) if lags else 0.0,
        "async/lag_max": float(max(lags, default=0)),
        "async/unsampled": float(len(keep) - len(lags)),
    }  # not the generator's (SPIN's human answers)
    if not drop:
        return batch, m
    m["async/dropped_stale"] = float(len(versions) - len(keep))
    if len(keep) == len(versions):
        return batch, m
    if not keep:
        return None, m
    return batch.subset(keep), m


class Overlap:
    """How the loop collects under ``plan.framed``: the generator records what it samples (the version
    of each sequence, and with the correction its log-probs), and with ``plan.async_train`` the
    collect of step t + 1 runs in a thread while step t updates (``beside``)."""

    def __init__(self, recipe, engines, plan, steps: int):
        self.recipe, self.gen, self.gate = recipe, engines.generator, engines.gate
        self.asynchronous, self.steps = plan.async_train, steps
        self.max_staleness = plan.max_staleness if plan.async_train else None
        self.version = 0  # policy updates applied
        self.ahead: Taken | None = None

    def _collect(self, step: int, version: int) -> Taken:
        """collect(step) with the generator serving policy ``version``, timed on a fresh clock."""
        times = start_times()
        self.gen.recording, self.gen.version = True, version
        try:
            got = checked(self.recipe.collect(step))
        finally:
            self.gen.recording = False
        batch, versions = got.batch, []
        if batch is not None:
            keys = [_key(p, t) for p, t in zip(batch.prompt_ids, batch.response_ids)]
            versions = [self.gen.versions.get(k) for k in keys]
            if self.gen.logprobs:  # sampled, but its log-probs are gone (pruned) or never came: weight 1
                got.metrics["async/behaviour_missing"] = float(
                    sum(k in self.gen.versions and k not in self.gen.lps for k in keys)
                )
                nan = float("nan")
                batch.behaviour_logprobs = [
                    torch.tensor(self.gen.lps.get(k, [nan] * len(t)), dtype=torch.float32)
                    for k, t in zip(keys, batch.response_ids)
                ]
        return Taken(step, got, times, versions)

    def take(self, step: int) -> Taken:
        """The collect for ``step``: the one made ahead (the first step, or a resume without one,
        collects now), without the sequences too stale to train."""
        if self.ahead is not None and self.ahead.step == step:
            taken, self.ahead = self.ahead, None
        else:
            taken = self._collect(step, self.version)
        got = taken.got
        if got.batch is not None:
            got.batch, lag = stale_filter(got.batch, taken.versions, self.version, self.max_staleness)
            got.metrics.update(lag)
        return taken

    @contextmanager
    def beside(self, step: int, times: dict):
        """With --async_train: collect(step + 1) in a thread, on the weights served now, while the
        block (the update) runs; then wait for it (``time/collect_wait``)."""
        if not self.asynchronous or step >= self.steps:
            yield
            return
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
        try:
            yield
        finally:
            if self.gate is not None:
                self.gate.set()
            t0 = time.perf_counter()
            worker.join()
            times["collect_wait"] = time.perf_counter() - t0  # the next collect outlasted the update
        if "error" in box:
            raise box["error"]
        self.ahead = box.get("got")

    def trained(self) -> None:
        """An update was applied: the policy is one version newer."""
        self.version += 1

    def prune(self) -> None:
        """Older samples are dropped as stale; a synchronous run keeps KEEP_VERSIONS."""
        if self.gen.logprobs:
            self.gen.prune(self.version - (self.max_staleness or KEEP_VERSIONS) - 1)

    # ---- checkpointed: the version count, what was sampled, the collect done ahead ----------
    def state_dict(self) -> dict:
        a = self.ahead
        ahead = (
            None
            if a is None
            else {
                "step": a.step,
                "batch": None if a.got.batch is None else dataclasses.asdict(a.got.batch),
                "metrics": a.got.metrics,
                "times": a.times,
                "versions": a.versions,
                "state": a.got.local,
            }
        )
        return {"version": self.version, "versions": dict(self.gen.versions), "lps": dict(self.gen.lps), "ahead": ahead}

    def load_state_dict(self, state: dict) -> None:
        self.version = int(state["version"])
        self.gen.versions, self.gen.lps = dict(state["versions"]), dict(state["lps"])
        a = state.get("ahead")
        self.ahead = (
            None
            if a is None
            else Taken(
                a["step"],
                Collected(None if a["batch"] is None else TrainBatch(**a["batch"]), a["metrics"], _local(a["state"])),
                a["times"],
                a["versions"],
            )
        )
        if self.ahead is not None and not self.asynchronous:
            log.info(
                "the checkpoint holds the batch an --async_train run collected for step %d; it is trained first",
                self.ahead.step,
            )


@dataclass
class FramedEngines:
    """The run's engines as the recipe and the loop see them under ``plan.framed``."""

    generator: RecordingGenerator
    learner: Any  # GatedLearner under --async_train, else the learner
    checker: Any
    inner: Any  # the engines these wrap (closed with them)
    gate: threading.Event | None = None

    def close(self) -> None:
        self.inner.close()


def wrap_engines(cfg, plan, engines) -> FramedEngines:
    """The engines the recipe is given when the plan frames the step (``plan.framed``; before the
    recipe is built, so what it hands on is wrapped too): the generator records what it samples,
    and under --async_train the learner is gated (the loop's own calls, in this thread, pass)."""
    temperature = float(plan.learner.get("temperature", 1.0))  # the learner scores at this temperature
    if plan.is_cap and temperature != 1.0 and getattr(engines.generator, "raw_logprobs_only", False):
        from serl import ConfigError

        raise ConfigError(
            f"importance_sampling_correction: recipe '{cfg.recipe}' scores tokens at temperature "
            f"{temperature:g}, and the vllm generator returns log-probs at temperature 1 only; "
            f"use --generator hf, or leave the correction out"
        )
    gen = RecordingGenerator(engines.generator, plan.is_cap > 0, temperature)
    if not plan.async_train:
        return FramedEngines(gen, engines.learner, engines.checker, engines)
    learner = GatedLearner(engines.learner)
    return FramedEngines(gen, learner, engines.checker, engines, learner.gate)


def checked(got) -> Collected:
    """``recipe.collect``'s answer, which must be a ``Collected``."""
    if not isinstance(got, Collected):
        raise TypeError(f"Recipe.collect must return serl.run.step.Collected, not {type(got).__name__}")
    return got


def _local(state):
    """A checkpoint before step-local state came back from collect kept a dict of the recipe's
    attributes (``step_state``); the recipes that had one read the same dict as their local."""
    return state if state != {} else None
