"""Proxies that put groups of Ray actors behind the one-process protocols.

``GeneratorGroup`` is a ``Generator``, ``LearnerGroup`` a ``Learner`` and ``RewardGroup``
a ``Checker`` (``run_jobs``, ``equal_many``, ``close``), so a recipe's step and the
evaluation run unchanged against them. Collective learner calls go to every rank at
once with the same (shared) arguments; rank 0 answers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

from serl.engines.base import Completion, Sampling, TrainBatch

log = logging.getLogger("serl.distributed")


def _split(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous (start, end) ranges covering range(n), sizes differing by <= 1."""
    base, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        end = start + base + (1 if i < extra else 0)
        out.append((start, end))
        start = end
    return out


def _abs(path: str) -> str:
    """Actors do not share the driver's working directory: send absolute paths."""
    return str(Path(path).resolve())


class RemoteWeights:
    """Weights that live in Ray's object store: passed between groups without a copy
    through the driver; iterating fetches them (for any other consumer)."""

    def __init__(self, ref):
        self.ref = ref

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        import ray

        return iter(ray.get(self.ref).items())


class GeneratorGroup:
    """Generator protocol over ``vllm_num_engines`` engine actors (prompts split between them)."""

    def __init__(self, engines: list, sleep: bool = False):
        self.engines, self.sleep = engines, sleep

    def generate(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        import ray

        if not prompts:
            return []
        parts = [(e, prompts[a:b]) for e, (a, b) in zip(self.engines, _split(len(prompts), len(self.engines))) if b > a]
        if self.sleep:
            ray.get([e.wake_up.remote() for e, _ in parts])
        out = []
        for groups in ray.get([e.generate.remote(p, n, sampling) for e, p in parts]):
            out.extend(groups)
        if self.sleep:
            ray.get([e.sleep.remote() for e, _ in parts])
        return out

    def state_dict(self) -> dict:
        """Each engine's own state (its call count), in engine order."""
        import ray

        return {"engines": ray.get([e.state_dict.remote() for e in self.engines])}

    def load_state_dict(self, state: dict) -> None:
        import ray

        states = state.get("engines")
        if states is None:  # a one-process checkpoint's state: every engine starts from it
            states = [state] * len(self.engines)
        elif len(states) != len(self.engines):
            log.warning(
                "resume: %d generator engines now, %d when saved; sampling will differ from an uninterrupted run",
                len(self.engines),
                len(states),
            )
        ray.get([e.load_state_dict.remote(s) for e, s in zip(self.engines, states)])

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        import ray

        if isinstance(named_tensors, RemoteWeights):
            ref = named_tensors.ref
        else:
            ref = ray.put({k: v.detach().to("cpu") for k, v in named_tensors})
        if self.sleep:
            ray.get([e.wake_up.remote() for e in self.engines])
        ray.get([e.load_weights.remote(ref) for e in self.engines])
        if self.sleep:
            ray.get([e.sleep.remote() for e in self.engines])

    def close(self) -> None:
        import ray

        ray.get([e.close.remote() for e in self.engines])


class LearnerGroup:
    """Learner protocol over the learner ranks (and the reference workers, if any)."""

    def __init__(self, ranks: list, refs: list | None = None):
        self.ranks, self.refs = ranks, refs or []

    def _all(self, method: str, *args):
        """Call ``method`` on every rank with the same arguments; rank 0's answer."""
        import ray

        shared = [ray.put(a) for a in args]  # one copy in the object store, not one per rank
        return ray.get([getattr(r, method).remote(*shared) for r in self.ranks])[0]

    def logprobs(
        self, prompt_ids: list[list[int]], response_ids: list[list[int]], model: str = "policy"
    ) -> list[torch.Tensor]:
        import ray

        if model == "ref" and self.refs:
            spans = [s for s in _split(len(prompt_ids), len(self.refs)) if s[1] > s[0]]
            parts = ray.get(
                [w.logprobs.remote(prompt_ids[a:b], response_ids[a:b]) for w, (a, b) in zip(self.refs, spans)]
            )
            return [t for part in parts for t in part]
        return self._all("logprobs", prompt_ids, response_ids, model)

    def step(self, batch: TrainBatch) -> dict[str, float]:
        return self._all("step", batch)

    def sync_ref(self) -> None:
        if self.refs:
            raise NotImplementedError(
                "sync_ref with Ray reference workers: run with "
                "--ref_num_gpus_per_node 0 so the learner holds the reference"
            )
        self._all("sync_ref")

    def named_weights(self) -> RemoteWeights:
        import ray

        refs = [r.collect_weights.remote() for r in self.ranks]
        ray.get(refs[1:])  # the other ranks only take part in the gathers
        return RemoteWeights(refs[0])

    def save(self, path: str, state: bool = True) -> None:
        self._all("save", _abs(path), state)

    def load(self, path: str) -> None:
        self._all("load", _abs(path))

    def export_hf(self, path: str) -> None:
        self._all("export_hf", _abs(path))

    def close(self) -> None:
        self._all("close")


class RewardGroup:
    """Spreads the reward code's equivalence jobs over reward-worker actors."""

    def __init__(self, workers: list):
        self.workers = workers

    def run_jobs(self, jobs: list[dict]) -> list:
        import ray

        if not jobs:
            return []
        spans = [s for s in _split(len(jobs), len(self.workers)) if s[1] > s[0]]
        parts = ray.get([w.run_jobs.remote(jobs[a:b]) for w, (a, b) in zip(self.workers, spans)])
        return [r for part in parts for r in part]

    def equal_many(self, pairs: list[tuple[str, str]]) -> list[bool]:
        import ray

        if not pairs:
            return []
        spans = [s for s in _split(len(pairs), len(self.workers)) if s[1] > s[0]]
        parts = ray.get([w.equal_many.remote(pairs[a:b]) for w, (a, b) in zip(self.workers, spans)])
        return [r for part in parts for r in part]

    @property
    def stats(self) -> dict[str, int]:
        """The workers' checker counters (timeouts, errors, ...), summed."""
        import ray

        total: dict[str, int] = {}
        for part in ray.get([w.stats.remote() for w in self.workers]):
            for k, v in part.items():
                total[k] = total.get(k, 0) + v
        return total

    def close(self) -> None:
        import ray

        ray.get([w.close.remote() for w in self.workers])
