"""The protocols that keep the training loop independent of hardware.

A ``Generator`` turns prompt strings into groups of sampled completions and can
take new weights; a ``Learner`` scores token sequences and updates the policy; a
``Checker`` compares answers for rewards and evaluation.
Implementations: ``hf`` / ``vllm`` generators, ``torch`` / ``deepspeed`` learners.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch


@dataclass
class Sampling:
    """Sampling settings for one ``generate`` call."""

    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    presence_penalty: float = 0.0  # ignored by engines that lack it
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: bool = False  # also return each sampled token's log-prob, where the engine can
    # the temperature those log-probs are taken at: the learner's, so that they compare with its own
    # (raw logits / this, before top-p; vLLM gives raw log-probs only, i.e. 1.0)
    logprob_temperature: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass
class Completion:
    """One sampled continuation of one prompt."""

    text: str
    token_ids: list[int]
    prompt_ids: list[int]
    finish_reason: str = "stop"  # "stop" | "length"
    logprobs: list[float] | None = field(default=None, repr=False)


class Generator(Protocol):
    def generate(self, prompts: list[str] | list[list[int]], n: int, sampling: Sampling) -> list[list[Completion]]:
        """Return, for each prompt, ``n`` completions. A prompt is token ids (from
        ``serl.models.chat``, which keeps untrusted text out of the control tokens) or final
        model input as text; ``Completion.prompt_ids`` are the ids fed."""

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Serve these weights from now on (Hugging Face parameter names)."""

    def state_dict(self) -> dict:
        """What decides the next samples besides the weights (a call counter that seeds
        them): a checkpoint keeps it, so a resumed run samples as an uninterrupted one."""

    def load_state_dict(self, state: dict) -> None: ...

    def close(self) -> None: ...


@dataclass
class TrainBatch:
    """Sequences to train on; per-token tensors have one entry per response token."""

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    advantages: list[torch.Tensor] | None = None  # per token; pair objectives need none
    # None: the learner takes them from its own forward pass (detached), which is exact
    # for the first optimizer step on a fresh batch and saves a whole forward pass.
    old_logprobs: list[torch.Tensor] | None = None
    # per token under the reference model: the KL-loss term, or DPO (None: the learner's
    # own reference model scores them)
    ref_logprobs: list[torch.Tensor] | None = None
    pairs: list[tuple[int, int]] | None = None  # (chosen, rejected) sequence indices, for DPO
    objective: str | None = None  # overrides the learner's objective for this batch
    # per token under the policy that sampled it (the generator's); NaN where unknown (a sequence the
    # generator did not sample): the importance weight there is 1 (serl.algos.tis)
    behaviour_logprobs: list[torch.Tensor] | None = None

    def subset(self, idx: list[int]) -> TrainBatch:
        """The sequences at ``idx``, in that order (per-token fields follow along; pairs
        whose both sequences are kept are renumbered)."""

        def pick(xs: list | None) -> Any:
            return None if xs is None else [xs[i] for i in idx]

        pairs = None
        if self.pairs is not None:
            where = {i: k for k, i in enumerate(idx)}
            pairs = [(where[c], where[r]) for c, r in self.pairs if c in where and r in where]
        return TrainBatch(
            pick(self.prompt_ids),
            pick(self.response_ids),
            pick(self.advantages),
            pick(self.old_logprobs),
            pick(self.ref_logprobs),
            pairs,
            self.objective,
            pick(self.behaviour_logprobs),
        )

    def nonzero_rows(self) -> TrainBatch | None:
        """Without the sequences whose advantage is zero at every token (they would only
        cost compute); None when none is left."""
        keep = [i for i, a in enumerate(self.advantages or ()) if bool(torch.any(a != 0))]
        return self.subset(keep) if keep else None

    @staticmethod
    def concat(parts: list[TrainBatch | None]) -> TrainBatch | None:
        """One batch of every sequence of ``parts`` (None and empty parts skipped; advantage
        batches only: pairs and per-batch objectives do not combine); None when empty."""
        kept = [b for b in parts if b is not None and b.response_ids]
        if not kept:
            return None
        if any(b.pairs is not None or b.objective is not None for b in kept):
            raise ValueError("TrainBatch.concat joins advantage batches only (no pairs, no objective)")

        def join(name: str) -> Any:
            return None if any(getattr(b, name) is None for b in kept) else [x for b in kept for x in getattr(b, name)]

        return TrainBatch(
            join("prompt_ids"),
            join("response_ids"),
            join("advantages"),
            join("old_logprobs"),
            join("ref_logprobs"),
            behaviour_logprobs=join("behaviour_logprobs"),
        )


class Learner(Protocol):
    def logprobs(
        self, prompt_ids: list[list[int]], response_ids: list[list[int]], model: str = "policy"
    ) -> list[torch.Tensor]:
        """Log-probs of each response token under ``model`` ("policy" or "ref")."""

    def step(self, batch: TrainBatch) -> dict[str, float]:
        """One optimisation step over the batch (micro-batched inside); returns metrics."""

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The policy's current weights, without copying them."""

    def sync_ref(self) -> None:
        """Copy the policy's weights into the reference model (recipes that refresh it)."""

    def save(self, path: str, state: bool = True) -> None:
        """The policy (HF layout; LoRA: the adapter) and tokenizer into ``path``, with the
        optimizer, schedule and RNG state a ``load`` needs unless ``state`` is False."""

    def load(self, path: str) -> None: ...


class Checker(Protocol):
    """What reward and evaluation code call to compare answers (one process: the
    ``EquivalenceChecker`` pool; Ray: ``RewardGroup`` over reward actors)."""

    def run_jobs(self, jobs: list[dict]) -> list:
        """Run voting/clustering jobs (see ``serl.rewards._worker``); one result per job."""

    def equal_many(self, pairs: list[tuple[str, str]]) -> list[bool]:
        """Whether each (gold, answer) pair is the same mathematical answer."""

    def close(self) -> None: ...
