"""Held-out evaluation of self-play roles over documents, greedy, on labelled files.

The roles are SPELL's (Yang et al., "SPELL: Self-Play Reinforcement Learning for Evolving
Long-Context Language Models", Tongyi-Zhiwen 2025); the files are those of
:mod:`serl.recipes.spell.docs` (any with the same keys work):

* responder: gold questions about held-out clusters (``docs_heldout_qa.jsonl``), answered
  from the cluster's documents. **strict**: the answer phrase ("The answer is ...") and
  cover-EM of the gold (:mod:`serl.recipes.spell.qa`, math answers through the equivalence
  checker); **lenient**: the gold anywhere in the reply. Both side by side tell format
  gains from content gains.
* verifier: labelled (question, candidate, gold) items (``docs_heldout_verify.jsonl``);
  **accuracy** (judgment equals the label) and **bad_format** (neither ``[[YES]]`` nor
  ``[[NO]]``).
* questioner: one question per held-out cluster; **valid_json** (a question/answer block
  parsed) and **bad_ground** (of the valid ones, the share the responder answers right
  without the documents).

The recipe supplies the prompts and the questioner's parser (:class:`Roles`), so the
evaluation is the training-time view of each role. Inputs are checked up front (errors
name file, line and key); per-item records are returned for confidence intervals.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from serl import DataError
from serl.data.jsonl import keyed_rows
from serl.engines.base import Sampling
from serl.recipes.spell.corpus import Cluster, CorpusError, read_corpus, sample_evidence
from serl.recipes.spell.judge import parse_judgment
from serl.recipes.spell.qa import cover_em_many, extract_final_answer, lenient_score


@dataclass
class HeldOut:
    """Everything the evaluation reads; empty (falsy) when evaluation is off."""

    docs: dict[str, list[str]] = field(default_factory=dict)  # cluster id -> paragraphs
    qa: list[dict] = field(default_factory=list)
    verify: list[dict] = field(default_factory=list)
    clusters: list[Cluster] = field(default_factory=list)  # for the questioner

    def __bool__(self) -> bool:
        return bool(self.qa or self.verify or self.clusters)


@dataclass
class Roles:
    """How the evaluation talks to each role: chat-formatted prompts and reply lengths."""

    responder: Callable[[str, Sequence[str] | None], str | list[int]]  # (question, paragraphs or None) -> prompt
    verifier: Callable[[str, str, str], str | list[int]]  # (question, candidate, reference) -> prompt
    questioner: Callable[[Sequence[str]], str | list[int]]  # paragraphs -> prompt (text or token ids)
    parse_question: Callable[[str], dict | None]  # reply -> {"question", "answer"} or None
    responder_len: int  # max new tokens per reply, by role
    verifier_len: int
    questioner_len: int
    paragraphs_per_prompt: int = 2  # paragraphs the questioner sees
    grounding_threshold: float = 0.1  # no-document score that makes bad_ground
    verifier_prefill: str = ""  # the verifier prompt's last text (the reply's start)


read_rows = keyed_rows  # its name here (tests and callers)


def load_heldout(
    docs: str, qa: str, verify: str, qa_limit: int = 0, verify_limit: int = 0, questioner_limit: int = 0
) -> HeldOut:
    """The held-out clusters (``docs``), gold questions (``qa``) and labelled judgments
    (``verify``); a limit of 0 takes all. Errors name the option, file, line and key."""
    try:
        corpus = read_corpus(docs, cluster_size=10**9, text_key="text", cluster_key="cluster")
    except CorpusError as e:
        raise DataError(f"eval_docs: {e}") from None
    paragraphs = {c.id: c.paragraphs for c in corpus.clusters}
    qa_rows = read_rows(qa, ("cluster", "question", "answer"), qa_limit)
    for r in qa_rows:
        if str(r["cluster"]) not in paragraphs:
            raise DataError(f"{qa}:{r['line']}: cluster {r['cluster']!r} is not in {docs}")
    verify_rows = read_rows(verify, ("question", "candidate", "gold", "label"), verify_limit)
    for r in verify_rows:
        if str(r["label"]).lower() not in ("yes", "no"):
            raise DataError(f"{verify}:{r['line']}: key 'label' must be 'yes' or 'no'")
    n_q = questioner_limit or len(corpus.clusters)
    return HeldOut(paragraphs, qa_rows, verify_rows, corpus.clusters[:n_q])


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else math.nan


def evaluate_roles(generate, roles: Roles, equal_many, held: HeldOut) -> tuple[dict, list[dict]]:
    """Greedy evaluation of the three roles. ``generate(prompts, max_new_tokens)`` returns
    one text per prompt; ``equal_many`` is the math equivalence check (or None).
    Returns (metrics, records)."""
    metrics, records = {}, []
    if held.qa:
        outs = generate(
            [roles.responder(r["question"], held.docs[str(r["cluster"])]) for r in held.qa], roles.responder_len
        )
        golds = [str(r["answer"]) for r in held.qa]
        strict = cover_em_many([extract_final_answer(t) for t in outs], golds, equal_many)
        lenient = [lenient_score(t, g) for t, g in zip(outs, golds)]
        metrics["eval/responder/strict"], metrics["eval/responder/lenient"] = _mean(strict), _mean(lenient)
        records += [
            {"role": "responder", "line": r["line"], "hops": r.get("hops"), "strict": s, "lenient": le, "reply": t}
            for r, s, le, t in zip(held.qa, strict, lenient, outs)
        ]
    if held.verify:
        outs = generate(
            [roles.verifier(r["question"], str(r["candidate"]), str(r["gold"])) for r in held.verify],
            roles.verifier_len,
        )
        outs = [roles.verifier_prefill + t for t in outs]  # judged as written: prefill + reply
        judged = [parse_judgment(t) for t in outs]
        want = [1 if str(r["label"]).lower() == "yes" else 0 for r in held.verify]
        metrics["eval/verifier/accuracy"] = _mean(j == w for j, w in zip(judged, want))
        metrics["eval/verifier/bad_format"] = _mean(j == -1 for j in judged)
        records += [
            {"role": "verifier", "line": r["line"], "label": w, "judgment": j, "reply": t}
            for r, w, j, t in zip(held.verify, want, judged, outs)
        ]
    if held.clusters:
        prompts = []
        for i, c in enumerate(held.clusters):  # the same evidence at every evaluation
            ev = sample_evidence(len(c.paragraphs), roles.paragraphs_per_prompt, random.Random(i))
            prompts.append(roles.questioner([c.paragraphs[k] for k in ev]))
        parsed = [roles.parse_question(t) for t in generate(prompts, roles.questioner_len)]
        valid = [(c, qa) for c, qa in zip(held.clusters, parsed) if qa is not None]
        bad_ground = []
        if valid:
            outs = generate([roles.responder(qa["question"], None) for _, qa in valid], roles.responder_len)
            no_docs = cover_em_many(
                [extract_final_answer(t) for t in outs], [qa["answer"] for _, qa in valid], equal_many
            )
            bad_ground = [s >= roles.grounding_threshold for s in no_docs]
        metrics["eval/questioner/valid_json"] = len(valid) / len(held.clusters)
        metrics["eval/questioner/bad_ground"] = _mean(bad_ground)
        records += [
            {"role": "questioner", "cluster": c.id, "qa": qa, "bad_ground": b} for (c, qa), b in zip(valid, bad_ground)
        ]
    return metrics, records


def greedy_texts(generator, prompts: list[str], max_new_tokens: int) -> list[str]:
    """One greedy reply per prompt from a ``Generator``."""
    if not prompts:
        return []
    groups = generator.generate(prompts, 1, Sampling(max_new_tokens=max_new_tokens, temperature=0.0))
    return [g[0].text for g in groups]
