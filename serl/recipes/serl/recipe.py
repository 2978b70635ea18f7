"""The SeRL recipe (Fang et al., 2025, "SeRL: Self-Play Reinforcement Learning for Large
Language Models with Limited Data"). ``SerlRecipe.collect`` reads as the algorithm: fill
the batch (rounds of: grow the pool, roll out, reward, filter), advantages; the update, the
weight sync and the run around them are the run loop's (``serl.run.loop``).

A round rolls out ``gen_batch_size`` prompts (by default ``rollout_batch_size``): the pool's pending
problems, topped up by self-instruction (or the next seeds). Rounds repeat until ``rollout_batch_size``
groups passed the difficulty filter or ``max_refill_rounds`` are spent; kept groups beyond the batch
are trained first in the next step (``serl.recipes.serl.instruct.rollouts``), so no kept rollout is wasted. Prompts over
``prompt_max_len`` tokens are skipped and counted: seeds before any work (``data/skipped_long``, by file and
line), generated ones by the prompt-length filter; few-shot prompts leave out their longest examples.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from serl import DataError
from serl.algos import compute_advantages
from serl.algos.kl import padded_kl
from serl.data.lengths import fit_problems, prompt_limit
from serl.data.passes import Passes
from serl.data.seeds import read_seeds
from serl.engines.base import Completion, TrainBatch
from serl.recipes.base import Recipe, masked_overlong, response_mask, truncated
from serl.recipes.serl.config import Config as SerlConfig
from serl.recipes.serl.instruct import (
    DifficultyFilter,
    PoolItem,
    PromptPool,
    Rollout,
    SelfInstruct,
    TextFilters,
    fill_batch,
)
from serl.recipes.serl.instruct.filters import PromptLengthFilter
from serl.recipes.serl.instruct.pool import POOL_FILE
from serl.recipes.serl.instruct.rollouts import STEP_COUNTS, accumulate, batch_metrics, finalize, round_sums
from serl.recipes.serl.shaping import (
    CurriculumPasses,
    agreement_weight,
    easy_first,
    no_majority,
    score_cut_answers,
    vote_share,
)
from serl.report.progress import stage
from serl.rewards import GroupScore, checker_counts
from serl.rewards.remote import load_source, score_for
from serl.run.context import RunContext
from serl.run.step import Collected


class SerlRecipe(Recipe):
    cfg: SerlConfig  # its own options beside the common ones (for the type checker)

    @classmethod
    def prepare(cls, cfg):
        """The seed problems (the only input SeRL reads); the rule reward needs every label."""
        load_source(cfg)  # --remote_rm_url's file is loaded once, before anything is written
        seeds = read_seeds(
            cfg.prompt_data,
            cfg.input_key,
            cfg.label_key or None,
            limit=cfg.max_samples or None,
            output_key=cfg.output_key or None,
            split=cfg.prompt_split,
        )
        if cfg.reward_mode == "rule":
            bad = next((i for i, s in enumerate(seeds) if s.label is None), None)
            if bad is not None:
                raise DataError(
                    f"{cfg.prompt_data}: row {bad + 1} has no '{cfg.label_key}' label, which "
                    f"--reward_mode rule needs (auto votes on unlabelled problems)"
                )
        return fit_problems(cfg, seeds)  # longer than --prompt_max_len: skipped, counted, named

    def __init__(self, ctx: RunContext, seeds=None):
        super().__init__(ctx, seeds)
        cfg = self.cfg
        self.prompt_max_len = prompt_limit(cfg, ctx.model_path)
        if ctx.resuming and (self.run_dir / POOL_FILE).exists():
            self.pool = PromptPool.load(self.run_dir, until_step=ctx.resume_step)
        else:
            self.pool = PromptPool.create(self.run_dir, seeds)
        self.difficulty = DifficultyFilter(*cfg.reward_difficulty_bounds)
        icfg = cfg.instruct_config(self.prompt_max_len)
        filters = TextFilters.from_config(icfg)
        filters.add_filter(PromptLengthFilter(self.prompt_tokens, self.prompt_max_len))
        self.instruct = SelfInstruct(self.generator, self.tok, self.pool, icfg, filters)
        self.seeds = Passes(len(self.pool.seeds()), self.rng)  # epochs over the seeds, reshuffled
        self.carry: list[Rollout] = []  # kept groups beyond the last batch, trained next step
        self.curriculum: list[float] | None = None  # --curriculum agreement: each seed's probe vote share
        self.drawn: list[float] = []  # the probe shares of this step's seeds
        self.prompt_lens: dict[str, int] = {}

    def prompt_tokens(self, text: str) -> int:
        """Length of the rollout prompt for ``text`` (chat template and instruction included)."""
        if text not in self.prompt_lens:  # seeds come back every epoch
            self.prompt_lens[text] = len(self.chat_prompt(text))
        return self.prompt_lens[text]

    # ---- the step (the run loop runs the update and the weight sync) ---------------------
    def collect(self, step: int) -> Collected:
        self.counts = dict.fromkeys(STEP_COUNTS, 0)
        metrics: dict[str, float] = {}
        verify_before, carried = checker_counts(self.checker), len(self.carry)
        if self.cfg.curriculum == "agreement" and self.curriculum is None:
            self.probe_curriculum(metrics)
        self.drawn = []
        rollouts, self.carry, rounds = fill_batch(  # 1-4. rounds of: grow the
            self.cfg.rollout_batch_size,
            self.carry,  # pool, roll out, reward,
            lambda: self.round(step, metrics),
            self.cfg.max_refill_rounds,
        )  # difficulty-filter
        tally = (self.counts, min(carried, len(rollouts)), len(self.carry), verify_before, checker_counts(self.checker))
        metrics["filter/rounds"], metrics["train/batch_prompts"] = rounds, len(rollouts)
        if self.drawn:
            metrics["curriculum/share"] = float(np.mean(self.drawn))
        batch = self.make_batch(rollouts, metrics) if rollouts else None  # 5. advantages
        # this collect's counters and pool, for its after_update (the update leaves the pool alone)
        return Collected(batch, metrics, {"tally": tally, "pool_stats": self.pool.stats()})

    def round(self, step: int, metrics: dict) -> list[Rollout]:
        """One round: a batch's worth of prompts, rolled out, rewarded and filtered."""
        items = self.next_prompts(step, metrics)  # 1. grow the pool
        groups = self.rollout(items)  # 2. roll out
        scores = self.reward(items, groups, metrics)  # 3. self-reward
        return self.filter(step, items, groups, scores)  # 4. difficulty filter

    def after_update(self, step: int, metrics: dict, updated: bool, local: Any = None) -> None:
        self.pool.flush(step)
        finalize(metrics)
        metrics.update(batch_metrics(*local["tally"]))
        metrics.update(local["pool_stats"])

    # ---- its own checkpointed state (step, RNGs and the generator: serl.run.state) -------
    def state_dict(self) -> dict:
        return {
            "seeds": self.seeds.state_dict(),
            "difficulty": dict(vars(self.difficulty)),
            "carry": [r.state() for r in self.carry],
            "instruct": self.instruct.state_dict(),
            "curriculum": self.curriculum,
        }

    def load_state_dict(self, state: dict) -> None:
        if "seed_order" in state:  # a checkpoint of serl before run_state: the seeds by pool id
            where = {it.id: i for i, it in enumerate(self.pool.seeds())}
            state = state | {"seeds": [where[i] for i in state["seed_order"]]}
        if state.get("curriculum") is not None and self.cfg.curriculum == "agreement":  # the probe's order
            self.curriculum = [float(x) for x in state["curriculum"]]
            self.seeds = CurriculumPasses(easy_first(self.curriculum), self.rng)
        self.seeds.load_state_dict(state["seeds"])
        vars(self.difficulty).update(state["difficulty"])
        self.carry = [Rollout.from_state(r, self.pool) for r in state.get("carry", [])]
        self.instruct.load_state_dict(state.get("instruct", {}))

    # ---- stages ---------------------------------------------------------------------
    def next_prompts(self, step: int, metrics: dict) -> list[PoolItem]:
        """A round's prompts (``gen_batch_size``, by default a batch's worth): the pool's pending
        problems, topped up by new ones that pass the text filters (prompt length included);
        without self-evolution, the next seeds of a shuffled epoch."""
        need = self.cfg.gen_batch_size or self.cfg.rollout_batch_size
        if not self.cfg.enable_self_evolution:
            return self.next_seeds(need)
        items = [it for it in self.pool.generated() if it.status == "pending"][:need]
        if len(items) < need:
            with self.timed("instruct"), stage("self-instruct", need - len(items), "problems", self.progress) as st:
                new, m = self.instruct.propose(need - len(items), step, self.rng)
                st.update(len(new))
            accumulate(metrics, m)
            items += new
            self.counts["batch/generated"] += len(new)
            self.counts["batch/skipped_long"] += int(m.get("filter/prompt_len/rejected", 0))
        return items

    def next_seeds(self, need: int) -> list[PoolItem]:
        items: list = []
        seeds, skipped_in_a_row = self.pool.seeds(), 0
        while len(items) < need:
            k = self.seeds.next()
            item = seeds[k]
            fits = self.prompt_tokens(item.text) <= self.prompt_max_len
            items += [item] if fits else []
            if fits and self.curriculum is not None:
                self.drawn.append(self.curriculum[k])
            skipped_in_a_row = 0 if fits else skipped_in_a_row + 1
            self.counts["batch/skipped_long"] += not fits
            if skipped_in_a_row > len(seeds):
                raise DataError(
                    f"{self.cfg.prompt_data}: no seed problem fits in --prompt_max_len "
                    f"{self.prompt_max_len} tokens (chat template and instruction included)"
                )
        return items

    def probe_curriculum(self, metrics: dict) -> None:
        """CuMa's easy-first order: every seed rolled out once by the untrained policy and voted
        on; the seeds are then trained in order of vote share, highest first, every pass."""
        seeds, n = self.pool.seeds(), self.cfg.n_samples_per_prompt
        fit = [i for i, it in enumerate(seeds) if self.prompt_tokens(it.text) <= self.prompt_max_len]
        shares = [-1.0] * len(seeds)  # a seed that does not fit goes last (next_seeds skips it)
        chunk = self.cfg.gen_batch_size or self.cfg.rollout_batch_size
        with self.timed("curriculum"), stage("curriculum probe", len(fit) * n, "samples", self.progress) as st:
            for k in range(0, len(fit), chunk):
                part = fit[k : k + chunk]
                groups = self.sample([self.chat_prompt(seeds[i].text) for i in part], n)
                scores = score_for(self.cfg, self.checker, self.tok, groups, [seeds[i].label for i in part])
                for i, sc in zip(part, scores):
                    shares[i] = vote_share(sc)
                st.update(sum(len(g) for g in groups))
        self.curriculum = shares
        self.seeds = CurriculumPasses(easy_first(shares), self.rng)
        metrics["curriculum/probed"] = len(fit)
        metrics["curriculum/probe_share_mean"] = float(np.mean([shares[i] for i in fit])) if fit else 0.0
        with open(self.run_dir / "curriculum.jsonl", "w") as f:  # the order, for a reader of the run
            for i in easy_first(shares):
                f.write(json.dumps({"id": seeds[i].id, "share": shares[i]}) + "\n")

    def rollout(self, items: list[PoolItem]) -> list[list[Completion]]:
        if not items:
            return []
        n = self.cfg.n_samples_per_prompt
        with self.timed("generate"), stage("rollout", len(items) * n, "samples", self.progress) as st:
            prompts = [self.chat_prompt(i.text) for i in items]
            groups = self.sample(prompts, n)
            st.update(sum(len(g) for g in groups))
        self.counts["batch/rolled_out"] += len(items)
        self.counts["rollout/prompt_tokens"] += sum(len(p) for p in prompts)
        self.counts["rollout/gen_tokens"] += sum(len(c.token_ids) for g in groups for c in g)
        return groups

    def reward(self, items, groups, metrics: dict) -> list[GroupScore]:
        if not items:
            return []
        labels = [i.label for i in items]
        with self.timed("reward"), stage("reward", len(groups), "groups", self.progress) as st:
            scores = score_for(self.cfg, self.checker, self.tok, groups, labels)  # built-in or --remote_rm_url
            st.update(len(scores))
        accumulate(metrics, round_sums(scores, groups))
        return scores

    def filter(self, step, items, groups, scores) -> list[Rollout]:
        kept = []
        with self.timed("filter"):
            for item, group, score in zip(items, groups, scores):
                ok, why = self.difficulty.check(score.agreement)
                self.pool.record_rollout(item.id, step, score.agreement, score.label, ok, why)
                key = "filter/difficulty/" + ("kept" if ok else str(why))
                self.counts[key] = self.counts.get(key, 0) + 1
                if ok:
                    kept.append(Rollout(item, group, score, step))
        return kept

    def make_batch(self, rollouts: list[Rollout], metrics: dict) -> TrainBatch | None:
        """Log-probs, KL and advantages for the kept groups (whitening sees only these);
        with ``overlong_filter``, truncated responses are then left out of the loss. The
        label-free options (serl.recipes.serl.shaping) act here: voted groups without a clear
        majority are left out, cut answers scored, advantages weighted by majority share."""
        cfg = self.cfg
        low = [no_majority(r.score, cfg.min_majority_share) for r in rollouts]
        if cfg.min_majority_share and not cfg.no_majority_penalty:  # CuMa: no clear majority, no signal
            metrics["train/masked_no_majority"] = sum(low)
            rollouts, low = [r for r, m in zip(rollouts, low) if not m], [False] * (len(rollouts) - sum(low))
        elif cfg.min_majority_share:  # RESTRAIN: a negative signal instead
            metrics["train/penalized_no_majority"] = sum(low)
        prompt_ids, response_ids, rewards, group_ids, keep, cut, weights, penalized = [list[Any]() for _ in range(8)]
        for g, r in enumerate(rollouts):
            w = agreement_weight(r.score, cfg.agreement_weight_power)
            for c, rew in zip(r.group, r.score.rewards):
                if not c.token_ids:
                    continue
                if not masked_overlong(c, cfg.overlong_filter):
                    keep.append(len(response_ids))
                prompt_ids.append(list(c.prompt_ids))
                response_ids.append(list(c.token_ids))
                rewards.append(0.0 if low[g] else rew)
                group_ids.append(g)
                cut.append(truncated(c))
                weights.append(w)
                penalized.append(low[g])
        metrics["train/masked_truncated"] = len(response_ids) - len(keep)
        if not keep:
            return None
        if cfg.overlong_buffer_len or cfg.stop_properly_penalty_coef != 1.0:
            rewards, m = score_cut_answers(
                rewards,
                [len(r) for r in response_ids],
                cut,
                cfg.generate_max_len,
                cfg.overlong_buffer_len,
                cfg.overlong_penalty_factor,
                cfg.stop_properly_penalty_coef,
            )
            metrics.update(m)
        # The learner takes the old log-probs from its own forward pass (and before its first
        # mini-batch); they are computed here only for the KL penalty in the reward.
        with self.timed("logprobs"):
            old = self.learner.logprobs(prompt_ids, response_ids, model="policy") if self.plan.kl == "reward" else None
            ref = self.learner.logprobs(prompt_ids, response_ids, model="ref") if self.plan.kl != "none" else None
        lens = [len(r) for r in response_ids]
        mask = response_mask(lens)
        kl = None if old is None or ref is None else padded_kl(old, ref, mask, self.cfg.kl_clip)
        if kl is not None:
            metrics["kl/mean"] = float((kl.sum(1) / mask.sum(1)).mean())
        adv = compute_advantages(
            self.cfg.advantage_estimator,
            torch.tensor(rewards, dtype=torch.float32),
            torch.tensor(group_ids),
            mask,
            kl=kl,
            kl_coef=self.plan.kl_coef if kl is not None else 0.0,
            gamma=self.cfg.gamma,
        )
        if any(penalized):  # after the estimator and its whitening: -delta on every token of the group
            adv = adv - cfg.no_majority_penalty * torch.tensor(penalized, dtype=adv.dtype)[:, None] * mask
        if cfg.agreement_weight_power:  # then the weight scales the group's whole advantage (RESTRAIN's u_x)
            adv = adv * torch.tensor(weights)[:, None]
            metrics["train/agreement_weight_mean"] = float(np.mean([weights[i] for i in keep]))
        metrics["train/sequences"] = len(keep)
        # the tokens each scoring pass and the update run over, prompts included (bench/roofline.py)
        metrics["train/logprob_tokens"] = sum(len(p) + n for p, n in zip(prompt_ids, lens))
        metrics["train/logprob_answer_tokens"] = sum(lens)
        metrics["train/logprob_passes"] = (old is not None) + (ref is not None)
        metrics["train/tokens"] = sum(len(prompt_ids[i]) + lens[i] for i in keep)
        metrics["train/reward_mean"] = float(np.mean([rewards[i] for i in keep]))
        batch = TrainBatch(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            advantages=[adv[i, :n] for i, n in enumerate(lens)],
            old_logprobs=old,
            ref_logprobs=ref if self.plan.kl == "loss" else None,
        )
        return batch if len(keep) == len(lens) else batch.subset(keep)

    def close(self) -> None:
        self.pool.flush()


Recipe = SerlRecipe  # type: ignore[misc, assignment]  # the name the registry reads
