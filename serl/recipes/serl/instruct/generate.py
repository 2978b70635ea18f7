"""Self-instruction: few-shot prompts from the pool -> generator -> numbered items -> filters."""

from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import dataclass

from serl.engines.base import Sampling
from serl.recipes.serl.instruct.config import InstructConfig
from serl.recipes.serl.instruct.filters import TextFilters
from serl.recipes.serl.instruct.pool import PoolItem, PromptPool
from serl.recipes.serl.instruct.template import build_prompt_ids, load_template, parse_items

log = logging.getLogger(__name__)
ONE_CALL_MARGIN = 1.25  # prompts sent per prompt the yield so far says are needed (one_call)


@dataclass
class Candidate:
    """One parsed item and what the filters said about it (for logs and the CLI)."""

    text: str
    parents: list[str]
    attempt: int
    filter: str | None  # rejecting filter; None = passed; "surplus" = not checked, enough already
    reason: str | None
    item_id: str | None = None  # pool id when it was added


class SelfInstruct:
    def __init__(self, generator, tokenizer, pool: PromptPool, cfg: InstructConfig, filters: TextFilters | None = None):
        self.generator = generator
        self.tokenizer = tokenizer
        self.pool = pool
        self.cfg = cfg
        self.template = load_template(cfg.template)
        self.filters = filters or TextFilters.from_config(cfg)
        self.sampling = Sampling(
            max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            presence_penalty=cfg.presence_penalty,
        )
        self.last_candidates: list[Candidate] = []
        self.shots_dropped = self.prompts_too_long = 0  # few-shot prompts cut to fit (counters)
        # prompts sent and problems accepted over the run: the yield that sizes one_call's calls
        self.prompts_sent = self.problems_accepted = 0

    def state_dict(self) -> dict:
        return {"prompts_sent": self.prompts_sent, "problems_accepted": self.problems_accepted}

    def load_state_dict(self, state: dict) -> None:
        self.prompts_sent = int(state.get("prompts_sent", 0))
        self.problems_accepted = int(state.get("problems_accepted", 0))

    def call_size(self, need: int, budget: int) -> int:
        """Few-shot prompts for the next call when ``need`` problems are still missing and
        ``budget`` prompts are left to this ``propose``."""
        if not self.cfg.one_call:
            return self.cfg.prompts_per_call
        per_prompt = self.problems_accepted / self.prompts_sent if self.problems_accepted else 1.0
        # a quarter more than the mean says: a call that falls short costs a second call of
        # nearly the same time (its length is set by the longest completion, not the batch)
        return max(1, min(budget, math.ceil(ONE_CALL_MARGIN * need / per_prompt)))

    def make_prompt(self, rng: random.Random) -> tuple[list[int] | None, list[PoolItem]]:
        """(prompt ids, examples). Over ``max_prompt_tokens``, the longest example is left
        out until the prompt fits; None when even one example is too long."""
        shots = self.pool.fewshot_examples(rng, self.cfg.n_shots, self.cfg.max_generated_shots)
        limit = self.cfg.max_prompt_tokens
        while True:
            ids = build_prompt_ids(self.template, [s.text for s in shots], self.tokenizer, self.cfg.chat_format)
            if not limit or len(ids) <= limit:
                return ids, shots
            if len(shots) == 1:
                self.prompts_too_long += 1
                return None, shots
            shots = [s for s in shots if s is not max(shots, key=lambda s: len(s.text))]
            self.shots_dropped += 1

    def propose(self, n: int, step: int, rng: random.Random) -> tuple[list[PoolItem], dict[str, float]]:
        """Generate until ``n`` candidates pass the text filters or ``max_attempts``
        generate calls are spent; add the passing ones to the pool as pending."""
        t0 = time.perf_counter()
        self.filters.sync(self.pool.known_texts())
        before = self.filters.counters()
        added: list[PoolItem] = []
        cands: list[Candidate] = []
        attempts = completions = empty = tokens = truncated = prompt_tokens = 0
        engine_s = 0.0  # inside generator calls; the rest of time/instruct is prompts, parsing, filters
        dropped, too_long = self.shots_dropped, self.prompts_too_long
        budget = self.cfg.prompts_per_call * self.cfg.max_attempts
        while len(added) < n and attempts < self.cfg.max_attempts and budget > 0:
            attempts += 1
            size = self.call_size(n - len(added), budget)
            budget -= size
            batch = [(p, s) for p, s in (self.make_prompt(rng) for _ in range(size)) if p is not None]
            self.prompts_sent += len(batch)
            if not batch:
                continue
            prompt_tokens += sum(len(p) for p, _ in batch)  # the work of the prefill (bench/roofline.py)
            t_call = time.perf_counter()
            groups = self.generator.generate([p for p, _ in batch], self.cfg.samples_per_prompt, self.sampling)
            engine_s += time.perf_counter() - t_call
            for (_, shots), group in zip(batch, groups):
                parents = [s.id for s in shots]
                for comp in group:
                    completions += 1
                    tokens += len(comp.token_ids)
                    truncated += comp.finish_reason == "length"
                    items = parse_items(comp.text, len(shots) + 1, comp.finish_reason == "length")
                    empty += not items
                    for text in items:
                        if len(added) >= n:
                            cands.append(Candidate(text, parents, attempts, "surplus", None))
                            continue
                        norm, fname, reason = self.filters.check(text)
                        c = Candidate(norm, parents, attempts, fname, reason)
                        if fname is None:
                            item = self.pool.add_generated([norm], step, [parents])[0]
                            c.item_id = item.id
                            added.append(item)
                            self.problems_accepted += 1
                            # index it now: later candidates of this batch must differ from it
                            self.filters.sync(self.pool.known_texts())
                        cands.append(c)
        self.last_candidates = cands
        elapsed = time.perf_counter() - t0
        checked = sum(c.filter != "surplus" for c in cands)
        if len(added) < n:
            log.warning(
                "self-instruct step %d: only %d of %d problems passed the text filters "
                "after %d generate calls (%d candidates checked); training goes on with fewer",
                step,
                len(added),
                n,
                attempts,
                checked,
            )
        self.filters.log_counters(step, since=before)
        now = self.filters.counters()
        metrics = {k: now[k] - before.get(k, 0.0) for k in now}
        metrics.update(
            {
                "instruct/requested": float(n),
                "instruct/accepted": float(len(added)),
                "instruct/candidates": float(checked),
                "instruct/attempts": float(attempts),
                "instruct/completions": float(completions),
                "instruct/empty_completions": float(empty),
                "instruct/truncated_completions": float(truncated),
                "instruct/gen_tokens": float(tokens),
                "instruct/prompt_tokens": float(prompt_tokens),
                "time/instruct_engine": engine_s,
                "instruct/accept_rate": len(added) / checked if checked else 0.0,
                "time/instruct": elapsed,
            }
        )
        for key, n in (
            ("instruct/shots_dropped", self.shots_dropped - dropped),
            ("instruct/prompts_too_long", self.prompts_too_long - too_long),
        ):
            if n:  # only when a few-shot prompt had to be cut to fit
                metrics[key] = float(n)
        return added, metrics
