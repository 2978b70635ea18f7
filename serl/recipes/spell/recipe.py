"""The SPELL recipe (Yang et al., "SPELL: Self-Play Reinforcement Learning for Evolving
Long-Context Language Models", Tongyi-Zhiwen 2025): one policy as questioner, responder
and verifier over document clusters, trained with one GRPO update over all three roles.

A step, per sampled cluster: the questioner writes a JSON question and answer from a few
paragraphs (with the cluster's history memory in the prompt); repeated questions are
dropped (ROUGE-L); the responder answers without the documents (grounding check), then
n times with them; each answer gets a rule score (cover-EM) and k verifier judgments;
then the three roles' rewards. Groups with no reward spread are dropped and more
clusters are asked (dynamic sampling, bounded rounds); ``episode.py`` holds the data,
``serl.recipes.spell.role_batch`` joins the roles' batches into one, the run loop (``serl.run.loop``) runs the
update. ``--verifier_warmup_steps N``: ``warmup.py``.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time

from serl import DataError
from serl.data.lengths import PromptBudget, budget_for, prompt_limit
from serl.data.novelty import RougeIndex
from serl.data.passes import Passes
from serl.recipes.base import Recipe
from serl.recipes.spell import episode
from serl.recipes.spell.config import Config as SpellConfig
from serl.recipes.spell.corpus import CorpusError, fit_clusters, read_corpus, sample_evidence
from serl.recipes.spell.evaluate import HeldOut, Roles, evaluate_roles, greedy_texts, load_heldout
from serl.recipes.spell.memory import HistoryMemory
from serl.recipes.spell.prompts import (
    QUESTIONER_PREFILL,
    VERIFIER_PREFILL,
    prefill,
    questioner_prompt,
    responder_prompt,
    verifier_prompt,
)
from serl.recipes.spell.qa import cover_em_many, extract_final_answer
from serl.recipes.spell.role_batch import join_roles
from serl.recipes.spell.warmup import warmup_pairs, warmup_step
from serl.report.progress import heartbeat
from serl.run.context import RunContext
from serl.run.step import Collected
from serl.shipped import locate

PROMPT_RESERVE = 256  # prompt tokens kept free of documents: chat template, instructions, question
MAX_KNOWN = 64  # questions remembered per cluster for the novelty check


class SpellRecipe(Recipe):
    cfg: SpellConfig  # its own options beside the common ones (for the type checker)

    @classmethod
    def prepare(cls, cfg):
        """The corpus as clusters that fit the prompt budget (paragraphs too long are skipped
        and counted); errors name the file."""
        if not locate(cfg.corpus).exists():  # before the tokenizer loads; the shipped corpus from anywhere
            raise DataError(f"corpus: corpus not found: {cfg.corpus}")
        limit = budget_for(cfg)  # the run's rule; a paragraph too long is not even tokenized
        budget = limit.max_tokens - PROMPT_RESERVE
        docs = PromptBudget(limit.tok, budget)

        def count(text: str) -> int:
            n = docs.measure(text)
            return budget + 1 if n is None else n + 4  # "[i] " and the break

        try:
            corpus = read_corpus(
                cfg.corpus,
                cluster_size=cfg.cluster_size,
                text_key=cfg.corpus_text_key,
                cluster_key=cfg.corpus_cluster_key or None,
                max_tokens=budget,
                count_tokens=count,
            )
            corpus.clusters = fit_clusters(corpus.clusters, count, budget)
        except CorpusError as e:
            raise DataError(f"corpus: {e}") from None
        warmup_pairs(cfg, cover_em_many, random.Random(0))  # checked now: file, line, key, held-out, both labels
        return corpus

    @classmethod
    def eval_set(cls, cfg):
        if not cfg.heldout_eval:
            return HeldOut()
        return load_heldout(
            cfg.eval_docs,
            cfg.eval_qa_data,
            cfg.eval_verify_data,
            cfg.eval_qa_limit,
            cfg.eval_verify_limit,
            cfg.eval_questioner_limit,
        )

    def __init__(self, ctx: RunContext, corpus=None):
        super().__init__(ctx, corpus)
        cfg = self.cfg
        self.clusters, self.corpus_stats = corpus.clusters, corpus.stats
        self.prompt_max_len = prompt_limit(cfg, ctx.model_path)
        self.memory = HistoryMemory(cfg.memory_capacity)
        self.known: dict[str, list[str]] = {}  # cluster id -> questions asked (novelty)
        self.indexes: dict[str, RougeIndex] = {}  # built from ``known``, not saved
        self.passes = Passes(len(self.clusters), self.rng)  # shuffled passes over the clusters
        self.band = tuple(cfg.verifier_band)
        self.prefill = prefill(QUESTIONER_PREFILL, cfg.questioner_prefill, cfg.compact_prompts)  # the reply's start
        self.verdict_prefill = prefill(VERIFIER_PREFILL, cfg.verifier_prefill, cfg.compact_prompts)
        self.warm = warmup_pairs(cfg, lambda c, g: cover_em_many(c, g, self.checker.equal_many), self.rng)

    # ---- the loop -------------------------------------------------------------------
    def collect(self, step: int) -> Collected:
        cfg = self.cfg
        if step <= cfg.verifier_warmup_steps:
            return Collected(*warmup_step(self))
        groups, asked, rounds = episode.RoleGroups(), [], 0
        while len(groups.responder) < cfg.rollout_batch_size and rounds < cfg.max_refill_rounds:
            rounds += 1
            qs = self.ask(self.next_clusters(cfg.rollout_batch_size - len(groups.responder)))
            self.ground(qs)
            self.respond(qs)
            self.verify(qs)
            for q in qs:
                episode.settle(q, cfg.questioner_reward, cfg.responder_reward)
                if q.status == "ok" and q.qa is not None:
                    self.memory.add(q.cluster.id, q.evidence, q.qa["question"], q.qa["answer"], q.mean_score)
                groups.add(q, self.band, cfg.rollout_batch_size)
            asked += qs
        metrics = episode.role_metrics(asked, groups) | {
            "filter/rounds": rounds,
            "questioner/memory_fill": self.memory.fill(len(self.clusters)),
            "corpus/skipped_long": float(self.corpus_stats.skipped_long),
            "corpus/clusters": float(len(self.clusters)),
        }
        return Collected(join_roles(episode.role_batches(groups, self.group_batch), metrics), metrics)  # <role>_seqs

    # ---- stages -----------------------------------------------------------------------
    def next_clusters(self, n: int):
        return [self.clusters[i] for i in self.passes.take(n)]

    def ask(self, clusters) -> list[episode.Question]:
        """The questioner's replies, parsed and checked for novelty."""
        cfg, prompts, evidence = self.cfg, [], []
        for c in clusters:
            ev = sample_evidence(
                len(c.paragraphs), cfg.paragraphs_per_prompt, self.rng, keep=self.memory.evidence(c.id)
            )
            history = self.memory.get(c.id)
            while True:  # the oldest examples go first when the prompt is over budget
                p = self.chat_prompt(
                    questioner_prompt(
                        [c.paragraphs[i] for i in ev],
                        history,
                        compact=cfg.compact_prompts,
                        few_shot=cfg.few_shot_questioner,
                    ),
                    prefill=self.prefill,
                )
                if len(p) <= self.prompt_max_len or not history:
                    break
                history = history[1:]
            prompts.append(p)
            evidence.append(ev)
        with self.timed("questioner"):
            replies = self.sample(prompts, 1, cfg.questioner_max_len, cfg.questioner_temperature)
        qs = []
        for c, ev, g in zip(clusters, evidence, replies):
            q = episode.Question(c, ev, g[0])
            q.status, q.qa = episode.parse_questioner(self.prefill + g[0].text)
            if q.status == "ok" and q.qa is not None and self.repeated(c.id, q.qa["question"]):
                q.status = "repeated"
            qs.append(q)
        return qs

    def repeated(self, cluster_id: str, question: str) -> bool:
        index = self.indexes.get(cluster_id)
        if index is None:
            index = self.indexes[cluster_id] = RougeIndex(self.cfg.novelty_threshold)
            for old in self.known.get(cluster_id, []):
                index.add(old)
        if index.too_similar(question)[0]:
            return True
        known = self.known.setdefault(cluster_id, [])
        known.append(question)
        if len(known) > MAX_KNOWN:  # forget the oldest; the index is rebuilt from the list
            del known[0]
            self.indexes.pop(cluster_id)
        else:
            index.add(question)
        return False

    def score(self, texts: list[str], golds: list[str]) -> tuple[list[str | None], list[float]]:
        answers = [extract_final_answer(t) for t in texts]
        with self.timed("reward"):
            return answers, cover_em_many(answers, golds, self.checker.equal_many)

    def ground(self, qs) -> None:
        """Grounding check: the responder without the documents; a hit makes it bad_ground."""
        todo = [q for q in qs if q.status == "ok"]
        with self.timed("ground"):
            groups = self.sample(
                [self.chat_prompt(responder_prompt(q.qa["question"], None, self.cfg.compact_prompts)) for q in todo],
                self.cfg.grounding_samples,
                self.cfg.generate_max_len,
            )
        for q, g in zip(todo, groups):
            _, s = self.score([c.text for c in g], [q.qa["answer"]] * len(g))
            q.ground = sum(s) / len(s)
            if episode.is_bad_ground(q.ground, self.cfg.grounding_threshold):
                q.status = "bad_ground"

    def respond(self, qs) -> None:
        todo = [q for q in qs if q.status == "ok"]
        with self.timed("responder"):
            groups = self.sample(
                [
                    self.chat_prompt(responder_prompt(q.qa["question"], q.cluster.paragraphs, self.cfg.compact_prompts))
                    for q in todo
                ],
                self.cfg.n_samples_per_prompt,
                self.cfg.generate_max_len,
            )
        for q, g in zip(todo, groups):
            q.responses = g
            q.answers, q.rule = self.score([c.text for c in g], [q.qa["answer"]] * len(g))

    def verify(self, qs) -> None:
        """k judgments per response that has an answer to compare."""
        todo = [(q, i) for q in qs if q.status == "ok" for i, a in enumerate(q.answers) if a is not None]
        for q in qs:
            q.judges = [[] for _ in q.responses]
        with self.timed("verifier"):
            groups = self.sample(
                [
                    self.chat_prompt(
                        verifier_prompt(q.qa["question"], q.answers[i], q.qa["answer"], self.cfg.compact_prompts),
                        prefill=self.verdict_prefill,
                    )
                    for q, i in todo
                ],
                self.cfg.verifier_samples,
                self.cfg.verifier_max_len,
            )
        for (q, i), g in zip(todo, groups):  # judged on prefill + reply; trained on the model's tokens
            q.judges[i] = [dataclasses.replace(c, text=self.verdict_prefill + c.text) for c in g]

    # ---- metrics, evaluation, state ----------------------------------------------------
    def evaluate(self, held, step: int = 0) -> dict[str, float]:
        """Greedy held-out scores of the three roles (``evaluate.py``) after ``step``."""
        t0 = time.perf_counter()
        with heartbeat("eval", self.progress):
            metrics, records = evaluate_roles(
                lambda ps, m: greedy_texts(self.generator, ps, m), self.roles(), self.checker.equal_many, held
            )
        secs = time.perf_counter() - t0
        out = self.run_dir / "spell_eval"
        out.mkdir(exist_ok=True)
        with open(out / f"step_{step}.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
        return metrics | {"time/eval": secs}

    def roles(self) -> Roles:
        """The three roles as the held-out evaluation drives them: the training prompts."""
        cfg, chat, compact = self.cfg, self.chat_prompt, self.cfg.compact_prompts
        return Roles(
            responder=lambda q, docs: chat(responder_prompt(q, docs, compact)),
            verifier=lambda q, a, ref: chat(verifier_prompt(q, a, ref, compact), prefill=self.verdict_prefill),
            verifier_prefill=self.verdict_prefill,
            questioner=lambda ps: chat(
                questioner_prompt(ps, compact=compact, few_shot=cfg.few_shot_questioner), prefill=self.prefill
            ),
            parse_question=lambda text: episode.parse_questioner(self.prefill + text)[1],
            responder_len=cfg.generate_max_len,
            verifier_len=cfg.verifier_max_len,
            questioner_len=cfg.questioner_max_len,
            paragraphs_per_prompt=cfg.paragraphs_per_prompt,
            grounding_threshold=cfg.grounding_threshold,
        )

    def state_dict(self) -> dict:
        return {
            "clusters": self.passes.state_dict(),
            "memory": self.memory.state_dict(),
            "known": {k: list(v) for k, v in self.known.items()},
        } | ({"warmup": self.warm.state_dict()} if self.warm is not None else {})

    def load_state_dict(self, state: dict) -> None:
        # before serl.run.state, "order" was the pass served from its end
        self.passes.load_state_dict(state["clusters"] if "clusters" in state else state["order"][::-1])
        self.memory.load_state_dict(state["memory"])
        self.known, self.indexes = {k: list(v) for k, v in state["known"].items()}, {}
        if self.warm is not None:
            self.warm.load_state_dict(state["warmup"])


Recipe = SpellRecipe  # type: ignore[misc, assignment]  # the name the registry reads
