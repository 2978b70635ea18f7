"""The SeRL recipe (Fang et al., 2025, "SeRL: Self-Play Reinforcement Learning for Large
Language Models with Limited Data"). ``SerlRecipe.step`` reads as the algorithm: fill the
batch (rounds of: grow the pool, roll out, reward, filter), learn, sync. The work lives in
the modules it calls; the run around it is ``serl.runner``'s.

A round rolls out ``rollout_batch_size`` prompts: the pool's pending problems, topped up by
self-instruction (or the next seeds, without it). Rounds repeat until ``rollout_batch_size``
groups passed the difficulty filter or ``max_refill_rounds`` are spent; kept groups beyond
the batch are trained first in the next step (``serl.instruct.rollouts``), so no kept
rollout is wasted. Prompts longer than ``prompt_max_len`` tokens are skipped and counted:
seeds before any work (``data/skipped_long``, named by file and line), generated problems
by the prompt-length filter; few-shot prompts leave out their longest examples to fit.
"""
from __future__ import annotations

import logging
import math
import random

import numpy as np
import torch

from serl.algos import compute_advantages, kl_estimate
from serl.checkpoint import fault_point
from serl.data.lengths import fit_problems, prompt_limit
from serl.data.seeds import DataError, read_seeds
from serl.guard import GUARD_OPTIONS
from serl.engines.base import Completion, Sampling, TrainBatch
from serl.instruct import (DifficultyFilter, InstructConfig, PoolItem, PromptPool, Rollout, SelfInstruct,
                           TextFilters, fill_batch)
from serl.instruct.filters import PromptLengthFilter
from serl.instruct.pool import POOL_FILE
from serl.progress import stage
from serl.recipes.base import Recipe, RunContext, masked_overlong, truncated
from serl.rewards import GroupScore, checker_counts
from serl.rewards.remote import load_source, score_for

log = logging.getLogger(__name__)


class SerlRecipe(Recipe):
    resume_fixed = ("enable_self_evolution", "reward_difficulty_bounds", "instructions_num_per_iteration",
                    "overlong_filter") + GUARD_OPTIONS

    @classmethod
    def prepare(cls, cfg):
        """The seed problems (the only input SeRL reads); the rule reward needs every label."""
        load_source(cfg)  # --remote_rm_url's file is loaded once, before anything is written
        seeds = read_seeds(cfg.prompt_data, cfg.input_key, cfg.label_key or None, limit=cfg.max_samples or None,
                           output_key=cfg.output_key or None, split=cfg.prompt_split)
        if cfg.reward_mode == "rule":
            bad = next((i for i, s in enumerate(seeds) if s.label is None), None)
            if bad is not None:
                raise DataError(f"{cfg.prompt_data}: row {bad + 1} has no '{cfg.label_key}' label, which "
                                f"--reward_mode rule needs (auto votes on unlabelled problems)")
        return fit_problems(cfg, seeds)  # longer than --prompt_max_len: skipped, counted, named

    @classmethod
    def guard_prompts(cls, data):
        return [(s.text, s.label) for s in data]

    @classmethod
    def updates_per_step(cls, cfg) -> int:
        """The rollout's sequences over ``train_batch_size``, one optimizer step each."""
        seqs = cfg.rollout_batch_size * cfg.n_samples_per_prompt
        size = cfg.train_batch_size
        return 1 if not size or size >= seqs else math.ceil(seqs / size)

    @classmethod
    def learner_settings(cls, cfg) -> dict:
        """SeRL sizes the LR schedule by ``instructions_num_per_iteration`` prompts, i.e.
        N * n_samples_per_prompt / train_batch_size optimizer steps (0: by ``--steps``)."""
        n = cfg.instructions_num_per_iteration
        return {"total_steps": math.ceil(n / cfg.rollout_batch_size) * cls.updates_per_step(cfg)} if n else {}

    def __init__(self, ctx: RunContext, seeds=None):
        super().__init__(ctx, seeds)
        cfg, tokenizer, generator = self.cfg, self.tok, self.generator
        self.rng = random.Random(cfg.seed)
        self.prompt_max_len = prompt_limit(cfg, ctx.model_path)
        if ctx.resuming and (self.run_dir / POOL_FILE).exists():
            self.pool = PromptPool.load(self.run_dir, until_step=ctx.resume_step)
        else:
            self.pool = PromptPool.create(self.run_dir, seeds)
        self.difficulty = DifficultyFilter(*cfg.reward_difficulty_bounds)
        icfg = InstructConfig(
            n_shots=cfg.few_shot_generation, prompts_per_call=cfg.few_shot_generation_batch_size,
            max_new_tokens=cfg.instruction_max_len, max_attempts=cfg.instruction_max_attempts,
            one_call=cfg.instruction_one_call,
            temperature=cfg.instruction_temperature, top_p=cfg.instruction_top_p,
            rouge_threshold=cfg.rouge_threshold, **({"template": cfg.few_shot_generation_prompt}
                                                    if cfg.few_shot_generation_prompt else {}),
            # a few-shot prompt and its reply must fit the engine's context (prompt_max_len +
            # generate_max_len, within the model's); its examples are seeds that fit already
            max_prompt_tokens=max(1, self.prompt_max_len + cfg.generate_max_len - cfg.instruction_max_len))
        filters = TextFilters.from_config(icfg)
        filters.add_filter(PromptLengthFilter(self.prompt_tokens, self.prompt_max_len))
        self.instruct = SelfInstruct(generator, tokenizer, self.pool, icfg, filters)
        self.seed_order: list[PoolItem] = []
        self.carry: list[Rollout] = []  # kept groups beyond the last batch, trained next step
        self.step_done = 0
        self.prompt_lens: dict[str, int] = {}

    def prompt_tokens(self, text: str) -> int:
        """Length of the rollout prompt for ``text`` (chat template and instruction included)."""
        if text not in self.prompt_lens:  # seeds come back every epoch
            self.prompt_lens[text] = len(self.chat_prompt(text))
        return self.prompt_lens[text]

    # ---- the loop -------------------------------------------------------------------
    def step(self, step: int) -> dict[str, float]:
        self.times = {}
        self.step_counts = {"filter/difficulty/kept": 0, "filter/difficulty/too_easy": 0,
                            "filter/difficulty/too_hard": 0, "batch/generated": 0, "batch/rolled_out": 0,
                            "batch/skipped_long": 0}
        metrics: dict[str, float] = {}
        verify_before = checker_counts(self.checker)
        with self.timed("step"):
            carried = len(self.carry)
            rollouts, self.carry, rounds = fill_batch(                      # 1-4. rounds of: grow the
                self.cfg.rollout_batch_size, self.carry,                    # pool, roll out, reward,
                lambda: self.round(step, metrics), self.cfg.max_refill_rounds)  # difficulty-filter
            metrics["filter/rounds"] = rounds
            batch = self.make_batch(rollouts, metrics) if rollouts else None  # 5. advantages
            if batch is not None:
                fault_point("learner", step)
                with self.timed("learner"), stage("update", len(batch.response_ids), "seqs",
                                                  self.progress) as st:
                    metrics.update(self.learn(batch))                       #    and update
                    st.update(len(batch.response_ids))
                self.sync_weights()                                         # 6. weight sync
            else:
                log.warning("step %d: nothing to train on after %d rounds (no prompt passed the "
                            "difficulty filter, or every response was masked); no update this step",
                            step, rounds)
            self.pool.flush(step)
        self.step_done = step
        metrics["train/batch_prompts"] = len(rollouts)
        metrics = finalize_metrics(metrics)
        metrics.update(self.step_counts)
        metrics["batch/dropped"] = self.step_counts["filter/difficulty/too_easy"] + \
            self.step_counts["filter/difficulty/too_hard"]
        metrics["batch/carried_in"] = min(carried, len(rollouts))
        metrics["batch/carried_out"] = len(self.carry)
        verify = checker_counts(self.checker)
        for key, name in (("timeouts", "verify_timeouts"), ("check_errors", "verify_errors")):
            if key in verify:
                metrics[f"reward/{name}"] = verify[key] - verify_before.get(key, 0)
        metrics.update(self.pool.stats())
        metrics.update({f"time/{k}": v for k, v in self.times.items()})
        return metrics

    def round(self, step: int, metrics: dict) -> list[Rollout]:
        """One round: a batch's worth of prompts, rolled out, rewarded and filtered."""
        items = self.next_prompts(step, metrics)                            # 1. grow the pool
        groups = self.rollout(items)                                        # 2. roll out
        scores = self.reward(items, groups, metrics)                        # 3. self-reward
        return self.filter(step, items, groups, scores)                     # 4. difficulty filter

    # ---- checkpointed state (everything that decides what happens next) -----------------
    def state_dict(self) -> dict:
        return {
            "step": self.step_done,
            "rng": self.rng.getstate(),
            "numpy_rng": np.random.get_state(),
            "torch_rng": torch.get_rng_state(),
            "generator_calls": getattr(self.generator, "calls", 0),
            "seed_order": [i.id for i in self.seed_order],
            "difficulty": dict(vars(self.difficulty)),
            "carry": [r.state() for r in self.carry],
            "instruct": self.instruct.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.step_done = state["step"]
        self.rng.setstate(state["rng"])
        np.random.set_state(state["numpy_rng"])
        torch.set_rng_state(state["torch_rng"])
        if hasattr(self.generator, "calls"):
            self.generator.calls = state["generator_calls"]
        self.seed_order = [self.pool.get(i) for i in state["seed_order"]]
        vars(self.difficulty).update(state["difficulty"])
        self.carry = [Rollout.from_state(r, self.pool) for r in state.get("carry", [])]
        self.instruct.load_state_dict(state.get("instruct", {}))

    # ---- stages ---------------------------------------------------------------------
    def next_prompts(self, step: int, metrics: dict) -> list[PoolItem]:
        """A batch's worth of prompts: the pool's pending problems, topped up by new ones
        that pass the text filters (prompt length included); without self-evolution, the
        next seeds of a shuffled epoch."""
        need = self.cfg.rollout_batch_size
        if not self.cfg.enable_self_evolution:
            return self.next_seeds(need)
        items = [it for it in self.pool.generated() if it.status == "pending"][:need]
        if len(items) < need:
            with self.timed("instruct"):
                new, m = self.instruct.propose(need - len(items), step, self.rng)
            _accumulate(metrics, m)
            items += new
            self.step_counts["batch/generated"] += len(new)
            self.step_counts["batch/skipped_long"] += int(m.get("filter/prompt_len/rejected", 0))
        return items

    def next_seeds(self, need: int) -> list[PoolItem]:
        items, skipped_in_a_row = [], 0
        while len(items) < need:
            if not self.seed_order:  # an epoch over the seeds, reshuffled each time
                self.seed_order = self.pool.seeds()
                self.rng.shuffle(self.seed_order)
            item = self.seed_order.pop(0)
            if self.prompt_tokens(item.text) <= self.prompt_max_len:
                items.append(item)
                skipped_in_a_row = 0
                continue
            self.step_counts["batch/skipped_long"] += 1
            skipped_in_a_row += 1
            if skipped_in_a_row > len(self.pool.seeds()):
                raise DataError(f"{self.cfg.prompt_data}: no seed problem fits in --prompt_max_len "
                                f"{self.prompt_max_len} tokens (chat template and instruction included)")
        return items

    def rollout(self, items: list[PoolItem]) -> list[list[Completion]]:
        if not items:
            return []
        sampling = Sampling(max_new_tokens=self.cfg.generate_max_len, temperature=self.cfg.temperature,
                            top_p=self.cfg.top_p)
        fault_point("generate", self.step_done + 1)
        n = self.cfg.n_samples_per_prompt
        with self.timed("generate"), stage("rollout", len(items) * n, "samples", self.progress) as st:
            groups = self.generator.generate([self.chat_prompt(i.text) for i in items], n, sampling)
            st.update(sum(len(g) for g in groups))
        self.step_counts["batch/rolled_out"] += len(items)
        return groups

    def reward(self, items, groups, metrics: dict) -> list[GroupScore]:
        if not items:
            return []
        labels = [i.label for i in items]
        with self.timed("reward"), stage("reward", len(groups), "groups", self.progress) as st:
            scores = score_for(self.cfg, self.checker, self.tok, groups, labels)  # built-in or --remote_rm_url
            st.update(len(scores))
        n = sum(len(s.rewards) for s in scores)
        _accumulate(metrics, {
            "reward/sum": sum(sum(s.rewards) for s in scores), "reward/count": n,
            "reward/agreement_sum": sum(s.agreement for s in scores), "reward/groups": len(scores),
            "reward/clusters_sum": sum(s.n_clusters for s in scores),
            "reward/no_answer": sum(s.n_no_answer for s in scores),
            "reward/ties": sum(int(s.tie) for s in scores),
            "response/length_sum": sum(len(c.token_ids) for g in groups for c in g),
            "response/truncated": sum(truncated(c) for g in groups for c in g),
        })
        return scores

    def filter(self, step, items, groups, scores) -> list[Rollout]:
        kept = []
        with self.timed("filter"):
            for item, group, score in zip(items, groups, scores):
                ok, why = self.difficulty.check(score.agreement)
                self.pool.record_rollout(item.id, step, score.agreement, score.label, ok, why)
                key = "filter/difficulty/" + ("kept" if ok else why)
                self.step_counts[key] = self.step_counts.get(key, 0) + 1
                if ok:
                    kept.append(Rollout(item, group, score, step))
        return kept

    def make_batch(self, rollouts: list[Rollout], metrics: dict) -> TrainBatch | None:
        """Log-probs, KL and advantages for the kept groups (whitening sees only these);
        with ``overlong_filter``, truncated responses are then left out of the loss."""
        prompt_ids, response_ids, rewards, group_ids, keep = [], [], [], [], []
        for g, r in enumerate(rollouts):
            for c, rew in zip(r.group, r.score.rewards):
                if not c.token_ids:
                    continue
                if not masked_overlong(c, self.cfg.overlong_filter):
                    keep.append(len(response_ids))
                prompt_ids.append(list(c.prompt_ids))
                response_ids.append(list(c.token_ids))
                rewards.append(rew)
                group_ids.append(g)
        metrics["train/masked_truncated"] = len(response_ids) - len(keep)
        if not keep:
            return None
        # With one optimizer step on this fresh batch the learner takes the old log-probs
        # from its own forward pass; they are computed here for the KL penalty in the
        # reward, or when later mini-batches are trained after the policy has moved.
        kl_in_reward = self.plan.kl == "reward"
        old = ref = None
        with self.timed("logprobs"):
            if kl_in_reward or len(self.minibatches(len(keep))) > 1:
                old = self.learner.logprobs(prompt_ids, response_ids, model="policy")
            if self.plan.kl != "none":
                ref = self.learner.logprobs(prompt_ids, response_ids, model="ref")
        lens = [len(r) for r in response_ids]
        mask = torch.zeros(len(lens), max(lens))
        for i, n in enumerate(lens):
            mask[i, :n] = 1
        kl = None
        if old is not None and ref is not None:
            kl = kl_estimate(_pad(old, mask), _pad(ref, mask), "k1", self.cfg.kl_clip) * mask
            metrics["kl/mean"] = float((kl.sum(1) / mask.sum(1)).mean())
        adv = compute_advantages(
            self.cfg.advantage_estimator, torch.tensor(rewards, dtype=torch.float32),
            torch.tensor(group_ids), mask, kl=kl,
            kl_coef=self.plan.kl_coef if kl is not None else 0.0, gamma=self.cfg.gamma)
        metrics["train/sequences"] = len(keep)
        metrics["train/reward_mean"] = float(np.mean([rewards[i] for i in keep]))
        batch = TrainBatch(prompt_ids=prompt_ids, response_ids=response_ids,
                           advantages=[adv[i, :n] for i, n in enumerate(lens)], old_logprobs=old,
                           ref_logprobs=ref if self.plan.kl == "loss" else None)
        return batch if len(keep) == len(lens) else batch.subset(keep)

    def minibatches(self, n: int) -> list[list[int]]:
        """Sequence indices of each optimizer step: ``train_batch_size`` at a time, shuffled
        (OpenRLHF's meaning of the flag); 0 or more than the batch: one step over all."""
        size = self.cfg.train_batch_size
        if not size or size >= n:
            return [list(range(n))]
        order = list(range(n))
        random.Random(self.cfg.seed * 1_000_003 + self.step_done).shuffle(order)
        return [order[s:s + size] for s in range(0, n, size)]

    def learn(self, batch: TrainBatch) -> dict[str, float]:
        """One optimizer step per mini-batch; metrics averaged over the steps."""
        parts = self.minibatches(len(batch.response_ids))
        if len(parts) == 1:
            return self.learner.step(batch)
        runs = [self.learner.step(batch.subset(idx)) for idx in parts]
        out = {k: sum(r[k] for r in runs) / len(runs) for k in runs[0]}
        out.update({k: runs[-1][k] for k in ("actor/updates", "actor/skipped_total") if k in runs[-1]})
        out["actor/skipped"] = max(r.get("actor/skipped", 0.0) for r in runs)
        out["actor/tokens"] = sum(r.get("actor/tokens", 0.0) for r in runs)
        out["actor/steps"] = float(len(runs))
        return out

    def close(self) -> None:
        self.pool.flush()


def _pad(seqs: list[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(mask)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = s.float()
    return out


def _accumulate(into: dict, more: dict) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def finalize_metrics(m: dict) -> dict:
    """Turn the per-round sums into the means that are logged."""
    out = dict(m)
    n, g = out.pop("reward/count", 0), out.pop("reward/groups", 0)
    if n:
        out["reward/mean"] = out.pop("reward/sum") / n
        out["reward/no_answer_frac"] = out.pop("reward/no_answer") / n
        out["response/length_mean"] = out.pop("response/length_sum") / n
        out["response/truncated_frac"] = out.pop("response/truncated") / n
    if out.get("instruct/candidates"):  # a rate over all rounds, not a sum of rates
        out["instruct/accept_rate"] = out["instruct/accepted"] / out["instruct/candidates"]
    if g:
        out["reward/agreement"] = out.pop("reward/agreement_sum") / g
        out["reward/clusters"] = out.pop("reward/clusters_sum") / g
        out["reward/groups"] = g
    return out


Recipe = SerlRecipe
