"""Held-out evaluation of SPELL's three roles, greedy, on labelled files.

* responder: gold questions about held-out clusters (``docs_heldout_qa.jsonl``), answered
  from the cluster's documents. **strict**: the answer phrase ("The answer is ...") and
  cover-EM of the gold (the training rule, math answers through the equivalence
  checker); **lenient**: the gold anywhere in the reply. Both side by side tell format
  gains from content gains.
* verifier: labelled (question, candidate, gold) items (``docs_heldout_verify.jsonl``);
  **accuracy** (judgment equals the label) and **bad_format** (neither ``[[YES]]`` nor
  ``[[NO]]``).
* questioner: one question per held-out cluster; **valid_json** (a question/answer block
  parsed) and **bad_ground** (of the valid ones, the share the responder answers right
  without the documents).

Inputs are checked when the run starts (errors name file, line and key); per-item
records go to ``RUN_DIR/spell_eval/step_N.jsonl`` for confidence intervals.
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

from serl.data.seeds import DataError
from serl.engines.base import Sampling
from serl.recipes.spell.corpus import Cluster, CorpusError, read_corpus, sample_evidence
from serl.recipes.spell.parse import parse_questioner
from serl.recipes.spell.prompts import questioner_prompt, responder_prompt, verifier_prompt
from serl.recipes.spell.rewards import cover_em_many, extract_final_answer, lenient_score, parse_judgment


@dataclass
class HeldOut:
    """Everything the evaluation reads; empty (falsy) when evaluation is off."""
    docs: dict[str, list[str]] = field(default_factory=dict)   # cluster id -> paragraphs
    qa: list[dict] = field(default_factory=list)
    verify: list[dict] = field(default_factory=list)
    clusters: list[Cluster] = field(default_factory=list)       # for the questioner

    def __bool__(self) -> bool:
        return bool(self.qa or self.verify or self.clusters)


def read_rows(path: str, keys: tuple[str, ...], limit: int = 0) -> list[dict]:
    """JSON objects of a JSONL file with string ``keys`` (errors name file, line, key)."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: file not found")
    rows = []
    for no, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{p}:{no}: not valid JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise DataError(f"{p}:{no}: expected a JSON object")
        for k in keys:
            if not isinstance(row.get(k), (str, int)) or isinstance(row.get(k), bool) or str(row[k]).strip() == "":
                raise DataError(f"{p}:{no}: key '{k}' missing or not a non-empty string")
        rows.append({**row, "line": no})
        if limit and len(rows) >= limit:
            break
    if not rows:
        raise DataError(f"{p}: no rows")
    return rows


def load_heldout(cfg) -> HeldOut:
    if not cfg.heldout_eval:
        return HeldOut()
    try:
        corpus = read_corpus(cfg.eval_docs, cluster_size=10 ** 9, text_key="text", cluster_key="cluster")
    except CorpusError as e:
        raise DataError(f"eval_docs: {e}") from None
    docs = {c.id: c.paragraphs for c in corpus.clusters}
    qa = read_rows(cfg.eval_qa_data, ("cluster", "question", "answer"), cfg.eval_qa_limit)
    for r in qa:
        if str(r["cluster"]) not in docs:
            raise DataError(f"{cfg.eval_qa_data}:{r['line']}: cluster {r['cluster']!r} is not in {cfg.eval_docs}")
    verify = read_rows(cfg.eval_verify_data, ("question", "candidate", "gold", "label"), cfg.eval_verify_limit)
    for r in verify:
        if str(r["label"]).lower() not in ("yes", "no"):
            raise DataError(f"{cfg.eval_verify_data}:{r['line']}: key 'label' must be 'yes' or 'no'")
    n_q = cfg.eval_questioner_limit or len(corpus.clusters)
    return HeldOut(docs, qa, verify, corpus.clusters[:n_q])


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else math.nan


def evaluate_roles(generate, chat, equal_many, held: HeldOut, cfg) -> tuple[dict, list[dict]]:
    """Greedy evaluation of the three roles. ``generate(prompts, max_new_tokens)`` returns
    one text per prompt; ``chat(text)`` applies the chat template. Returns (metrics, records)."""
    compact, metrics, records = cfg.compact_prompts, {}, []
    if held.qa:
        outs = generate([chat(responder_prompt(r["question"], held.docs[str(r["cluster"])], compact))
                         for r in held.qa], cfg.generate_max_len)
        golds = [str(r["answer"]) for r in held.qa]
        strict = cover_em_many([extract_final_answer(t) for t in outs], golds, equal_many)
        lenient = [lenient_score(t, g) for t, g in zip(outs, golds)]
        metrics["eval/responder/strict"], metrics["eval/responder/lenient"] = _mean(strict), _mean(lenient)
        records += [{"role": "responder", "line": r["line"], "hops": r.get("hops"), "strict": s,
                     "lenient": le, "reply": t} for r, s, le, t in zip(held.qa, strict, lenient, outs)]
    if held.verify:
        outs = generate([chat(verifier_prompt(r["question"], str(r["candidate"]), str(r["gold"]), compact))
                         for r in held.verify], cfg.verifier_max_len)
        judged = [parse_judgment(t) for t in outs]
        want = [1 if str(r["label"]).lower() == "yes" else 0 for r in held.verify]
        metrics["eval/verifier/accuracy"] = _mean(j == w for j, w in zip(judged, want))
        metrics["eval/verifier/bad_format"] = _mean(j == -1 for j in judged)
        records += [{"role": "verifier", "line": r["line"], "label": w, "judgment": j, "reply": t}
                    for r, w, j, t in zip(held.verify, want, judged, outs)]
    if held.clusters:
        prompts = []
        for i, c in enumerate(held.clusters):  # the same evidence at every evaluation
            ev = sample_evidence(len(c.paragraphs), cfg.paragraphs_per_prompt, random.Random(i))
            prompts.append(chat(questioner_prompt([c.paragraphs[k] for k in ev], compact=compact,
                                                  few_shot=cfg.few_shot_questioner)))
        parsed = [parse_questioner(t) for t in generate(prompts, cfg.questioner_max_len)]
        valid = [(c, qa) for c, (status, qa) in zip(held.clusters, parsed) if status != "bad_format"]
        bad_ground = []
        if valid:
            outs = generate([chat(responder_prompt(qa["question"], None, compact)) for _, qa in valid],
                            cfg.generate_max_len)
            no_docs = cover_em_many([extract_final_answer(t) for t in outs], [qa["answer"] for _, qa in valid],
                                    equal_many)
            bad_ground = [s >= cfg.grounding_threshold for s in no_docs]
        metrics["eval/questioner/valid_json"] = len(valid) / len(held.clusters)
        metrics["eval/questioner/bad_ground"] = _mean(bad_ground)
        records += [{"role": "questioner", "cluster": c.id, "qa": qa, "bad_ground": b}
                    for (c, qa), b in zip(valid, bad_ground)]
    return metrics, records


def greedy_texts(generator, prompts: list[str], max_new_tokens: int) -> list[str]:
    if not prompts:
        return []
    groups = generator.generate(prompts, 1, Sampling(max_new_tokens=max_new_tokens, temperature=0.0))
    return [g[0].text for g in groups]
