"""SPIN and online DPO on the recipe seam; config.py describes the two modes.

SPIN: Chen et al. 2024, "Self-Play Fine-Tuning Converts Weak Language Models to Strong
Language Models" (arXiv:2401.01335). Online DPO: verl's ``recipe/spin`` (inspired by SPIN).

The reference costs no second model where it equals the policy that wrote the answers:
its log-probs are then the policy's own no-grad log-probs, taken before the update.

- spin mode: at each iteration start (and every N steps with ``--ref_update steps:N``) the
  policy scores all the iteration's pairs once; the numbers are kept, and checkpointed,
  for the iteration's optimizer steps, so a resume anywhere in an iteration is exact.
- online, ``steps:1``: each step's pairs are scored by the policy before its update.
- online, ``steps:N`` (N > 1): the reference lags, and each step's *fresh* answers must be
  scored by the policy of up to N-1 steps ago, which no cache of earlier log-probs can
  supply; so the learner keeps a reference model, refreshed by ``sync_ref`` every N steps.
  A resume inside a window reloads it from the checkpoint at the window start.
"""

from __future__ import annotations

import torch

from serl import DataError
from serl.data.lengths import fit_problems
from serl.data.passes import Passes
from serl.data.seeds import Problem, read_seeds
from serl.engines.base import Completion, TrainBatch
from serl.models.chat import text_ids
from serl.recipes.base import Recipe
from serl.recipes.spin.config import Config as SpinConfig
from serl.recipes.spin.config import mixed_count
from serl.recipes.spin.pairs import best_worst_pairs
from serl.report.progress import stage
from serl.rewards.remote import load_source, score_for
from serl.run.step import Collected


def end_of_turn_id(tok) -> int:
    """The token that ends an assistant turn (``<|im_end|>`` in ChatML models, else EOS):
    the token the generators stop on, so human answers end the way sampled ones do."""
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tok.unk_token_id:
        return im_end
    return tok.eos_token_id


def answer_ids(tok, text: str) -> list[int]:
    """A human answer as response tokens, ended like a sampled answer; its text stays text
    (``serl.models.chat``): an ``<|im_end|>`` written in it is not the end of the turn."""
    return text_ids(tok, text) + [end_of_turn_id(tok)]


def pair_batch(triples: list[tuple[list[int], list[int], list[int]]]) -> TrainBatch:
    """(prompt, chosen, rejected) token ids -> a DPO batch: sequence 2k chosen, 2k+1 rejected."""
    return TrainBatch(
        prompt_ids=[list(t[0]) for t in triples for _ in range(2)],
        response_ids=[list(ids) for t in triples for ids in t[1:]],
        pairs=[(2 * k, 2 * k + 1) for k in range(len(triples))],
    )


def per_token_mean(logps: list[torch.Tensor]) -> float:
    """Mean over sequences of each sequence's mean token log-prob."""
    return float(sum(float(t.mean()) for t in logps) / max(1, len(logps)))


class SpinRecipe(Recipe):
    cfg: SpinConfig  # its own options beside the common ones (for the type checker)

    @classmethod
    def prepare(cls, cfg) -> list[Problem]:
        """The problems, with labels where given and, in spin mode, the human answers."""
        spin = cfg.spin_mode == "spin"  # online mode trains on its own answers only
        load_source(cfg)  # --remote_rm_url's file is loaded once, before anything is written
        try:
            problems = read_seeds(
                cfg.prompt_data,
                cfg.input_key,
                cfg.label_key or None,
                limit=cfg.max_samples or None,
                output_key=cfg.output_key if spin else None,
                split=cfg.prompt_split,
            )
        except DataError as e:  # prompts without human answers: verl's online DPO needs none
            if spin and f"'{cfg.output_key}'" in str(e):
                raise DataError(
                    f"{e}; or train on the model's own answers with --spin_mode online (verl's "
                    f"SPIN recipe: online DPO, no human answers)"
                ) from None
            raise
        if cfg.spin_mode == "online" and cfg.reward_mode == "rule":
            bad = next((i for i, p in enumerate(problems) if p.label is None), None)
            if bad is not None:
                raise DataError(
                    f"{cfg.prompt_data}: problem {bad + 1} has no '{cfg.label_key}'; "
                    f"--reward_mode rule needs a label on every problem"
                )
        # too long for --prompt_max_len (with the answer: for the run's context): skipped, counted
        return fit_problems(cfg, problems, with_answers=spin)

    def __init__(self, ctx, problems: list[Problem]):
        super().__init__(ctx, problems)
        self.problems = problems
        self.end_id = end_of_turn_id(self.tok)
        self.passes = Passes(len(problems), self.rng)  # shuffled passes over the problems
        # spin mode: the iteration's pairs (with reference log-probs) and step plan
        self.iteration = -1
        self.pool: TrainBatch | None = None
        self.batches: list[list[int]] = []  # pair indices of each optimizer step
        self.done = 0  # steps taken in this iteration
        self.previous: list[tuple] = []  # the last iteration's new (prompt, real, own) ids

    def collect(self, step: int) -> Collected:
        metrics: dict = {}
        spin = self.cfg.spin_mode == "spin"
        return Collected(self.spin_batch(metrics) if spin else self.online_batch(step, metrics), metrics)

    # ---- spin mode ----------------------------------------------------------------------
    def spin_batch(self, metrics: dict) -> TrainBatch:
        every = self.cfg.ref_every()
        if self.done >= len(self.batches):
            self.new_iteration(metrics)
        elif every and self.done % every == 0:
            self.score_reference(metrics)
        pairs = self.batches[self.done]
        self.done += 1
        metrics.update({"spin/iteration": float(self.iteration), "spin/iteration_step": float(self.done)})
        assert self.pool is not None  # made by new_iteration above
        return self.pool.subset([i for k in pairs for i in (2 * k, 2 * k + 1)])

    def new_iteration(self, metrics: dict) -> None:
        """The policy answers the iteration's prompts; pairs (human, own) plus a share of the
        previous iteration's; the step plan; reference log-probs of it all."""
        cfg = self.cfg
        self.iteration += 1
        picked = self.next_problems(cfg.iteration_size or len(self.problems))
        groups = self.generate(picked, metrics)
        new = [
            (list(c.prompt_ids), answer_ids(self.tok, p.solution or ""), list(c.token_ids) or [self.end_id])
            for p, g in zip(picked, groups)
            for c in g
        ]
        old = self.rng.sample(self.previous, mixed_count(cfg.mix_previous, len(self.previous)))
        self.previous = new
        triples = new + old
        self.pool = pair_batch(triples)
        self.batches, size = [], cfg.rollout_batch_size
        for _ in range(cfg.epochs_per_iteration):
            perm = list(range(len(triples)))
            self.rng.shuffle(perm)
            self.batches += [perm[s : s + size] for s in range(0, len(perm), size)]
        self.done = 0
        metrics.update(
            {
                "spin/pairs": float(len(triples)),
                "spin/pairs_previous": float(len(old)),
                "spin/identical": float(sum(t[1] == t[2] for t in triples)),
            }
        )
        self.score_reference(metrics)

    def score_reference(self, metrics: dict) -> None:
        """Reference = the policy now: its log-probs of every pair of the iteration."""
        pool = self.pool
        assert pool is not None  # the iteration's pairs are made first
        with self.timed("reference"), stage("reference", len(pool.response_ids), "seqs", self.progress) as st:
            pool.ref_logprobs = self.learner.logprobs(pool.prompt_ids, pool.response_ids, model="policy")
            st.update(len(pool.response_ids))
        metrics["spin/real_logp"] = per_token_mean(pool.ref_logprobs[0::2])
        metrics["spin/generated_logp"] = per_token_mean(pool.ref_logprobs[1::2])
        metrics["spin/reference_refreshed"] = 1.0

    # ---- online mode --------------------------------------------------------------------
    def online_batch(self, step: int, metrics: dict) -> TrainBatch | None:
        cfg, every = self.cfg, self.cfg.ref_every()
        if self.plan.ref_every and step > 1 and (step - 1) % every == 0:  # the learner's lags
            with self.timed("sync_ref"):
                self.learner.sync_ref()
            metrics["spin/reference_refreshed"] = 1.0
        picked = self.next_problems(cfg.rollout_batch_size)
        groups = self.generate(picked, metrics)
        texts = [[c.text for c in g] for g in groups]
        with self.timed("reward"):  # built-in (--reward_mode) or --remote_rm_url
            scores = score_for(cfg, self.checker, self.tok, groups, [p.label for p in picked])
        rewards = [[None if a is None else r for r, a in zip(s.rewards, s.answers)] for s in scores]
        pairs, counts = best_worst_pairs(rewards, texts)
        flat = [r for s in scores for r in s.rewards]
        metrics.update(counts.as_metrics())
        metrics["reward/mean"] = sum(flat) / len(flat)
        metrics["reward/no_answer_frac"] = sum(s.n_no_answer for s in scores) / len(flat)
        if not pairs:
            return None
        ids = lambda c: list(c.token_ids) or [self.end_id]  # noqa: E731
        batch = pair_batch(
            [
                (groups[p.group][p.chosen].prompt_ids, ids(groups[p.group][p.chosen]), ids(groups[p.group][p.rejected]))
                for p in pairs
            ]
        )
        if not self.plan.ref_every:  # steps:1: the reference is the policy that wrote these answers
            with self.timed("reference"):
                batch.ref_logprobs = self.learner.logprobs(batch.prompt_ids, batch.response_ids, model="policy")
        return batch

    # ---- shared ---------------------------------------------------------------------------
    def next_problems(self, n: int) -> list[Problem]:
        return [self.problems[i] for i in self.passes.take(n)]

    def generate(self, picked: list[Problem], metrics: dict) -> list[list[Completion]]:
        n = self.cfg.n_samples_per_prompt
        with self.timed("generate"), stage("rollout", len(picked) * n, "samples", self.progress) as st:
            groups = self.sample([self.chat_prompt(p.text) for p in picked], n)
            st.update(len(picked) * n)
        comps = [c for g in groups for c in g]
        metrics["response/length_mean"] = sum(len(c.token_ids) for c in comps) / len(comps)
        metrics["response/truncated_frac"] = sum(c.finish_reason == "length" for c in comps) / len(comps)
        return groups

    # ---- its own checkpointed state (step, RNGs and the generator: serl.run.state) ----------
    def state_dict(self) -> dict:
        pool = (
            None
            if self.pool is None
            else {k: getattr(self.pool, k) for k in ("prompt_ids", "response_ids", "ref_logprobs", "pairs")}
        )
        return {
            "order": self.passes.state_dict(),
            "iteration": self.iteration,
            "pool": pool,
            "batches": self.batches,
            "done": self.done,
            "previous": self.previous,
        }

    def load_state_dict(self, state: dict) -> None:
        self.passes.load_state_dict(state["order"])
        self.iteration, self.done = state["iteration"], state["done"]
        self.pool = None if state["pool"] is None else TrainBatch(**state["pool"])
        self.batches, self.previous = state["batches"], state["previous"]


Recipe = SpinRecipe  # type: ignore[misc, assignment]  # the name the registry reads
