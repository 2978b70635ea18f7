"""Math benchmarks: pass@1 (greedy), maj@K and pass@K (K samples).

maj@K uses ``serl.rewards.majority_vote``, the same clustering and tie rule as the
training reward: a problem counts as solved when the majority cluster's answer is
equivalent to the reference (math-verify, in the checker's worker pool). An
unanswered sample never joins the majority; a group with no answer at all is wrong.
An answer with nothing in it (``\\boxed{\\text{}}``, ``\\boxed{.}``) is unanswered
(:func:`serl.rewards.normalize.is_empty`), so empty answers can never carry maj@K.
"""

from __future__ import annotations

from serl.engines.base import Sampling
from serl.eval.data import MathProblem
from serl.eval.metrics import breakdown, generate_in_chunks, mean, pass_at_k
from serl.rewards import extract_answer, majority_vote

PROMPT_STYLES = ("raw", "chat", "chat_boxed")
BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
RAW_STOP = ("\n\n\n",)  # a raw prompt has no end-of-turn; SeRL's "pure" style stops here


def build_prompt(question: str, tokenizer, style: str = "chat_boxed", instruction: str = BOXED_INSTRUCTION) -> str:
    """``raw``: the question text as it is (SeRL's "pure" prompt);
    ``chat``: the question as the user turn of the chat template;
    ``chat_boxed``: the same plus ``instruction`` (by default: reason step by step and put
    the answer in ``\\boxed{}``; training runs pass their own ``--system_prompt``).
    This text is for reading; the model is fed ``build_prompt_ids`` (the question as plain text)."""
    if style == "raw":
        return question
    if style not in PROMPT_STYLES:
        raise ValueError(f"prompt style must be one of {PROMPT_STYLES}, got {style!r}")
    content = question.strip()
    if style == "chat_boxed":
        content = f"{content}\n{instruction}"
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
    )


def build_prompt_ids(
    question: str, tokenizer, style: str = "chat_boxed", instruction: str = BOXED_INSTRUCTION
) -> list[int]:
    """``build_prompt``'s prompt as the token ids fed to the model: the question is plain
    text (``serl.models.chat``), so special-token strings in it cannot forge a turn."""
    from serl.models.chat import text_ids, user_ids

    if style == "raw":
        return text_ids(tokenizer, question)
    if style not in PROMPT_STYLES:
        raise ValueError(f"prompt style must be one of {PROMPT_STYLES}, got {style!r}")
    return user_ids(tokenizer, question.strip(), instruction if style == "chat_boxed" else "")


FALLBACKS = ("number", "none")


def _fallback(p: MathProblem, fallback: str) -> str:
    return "choice" if p.choice else fallback


def _verdicts(problems: list[MathProblem], answers: list[list[str | None]], checker) -> list[list[bool]]:
    """Each answer against its problem's reference; letters compare exactly, the rest
    through math-verify (one batch for everything)."""
    out = [[False] * len(a) for a in answers]
    pairs, where = [], []
    for i, (p, group) in enumerate(zip(problems, answers)):
        for j, a in enumerate(group):
            if a is None:
                continue
            if p.choice:
                out[i][j] = a.strip().upper() == p.gold.upper()
            else:
                pairs.append((p.gold, a))
                where.append((i, j))
    for (i, j), ok in zip(where, checker.equal_many(pairs) if pairs else []):
        out[i][j] = bool(ok)
    return out


def evaluate_math(
    generator,
    tokenizer,
    problems: list[MathProblem],
    k: int = 8,
    *,
    checker,
    greedy: bool = True,
    max_new_tokens: int = 1024,
    temperature: float = 1.0,
    top_p: float = 0.95,
    prompt_style: str = "chat_boxed",
    seed: int | None = None,
    prefix: str = "eval",
    chunk: int = 64,
    fallback: str = "number",
    log=None,
    instruction: str = BOXED_INSTRUCTION,
) -> dict:
    """Evaluate ``generator`` on math problems (any mix of benchmarks).

    Returns ``{"metrics": {...}, "benchmarks": {...}, "items": {...}, "records": [...]}``:
    ``metrics`` is flat, ready for a metrics sink: ``<prefix>/<bench>/pass@1`` (greedy),
    ``<prefix>/<bench>/maj@K``, ``<prefix>/<bench>/pass@K`` and ``<prefix>/<bench>/mean@K``
    (mean sample accuracy); ``benchmarks`` adds n, no-answer rates and per-level /
    per-subject breakdowns; ``records`` has one dict per generation.
    ``items`` has each metric's per-problem values (``{"ids": [...], "values": [...]}``).
    ``k=0`` skips sampling; ``greedy=False`` skips the greedy pass. ``fallback``: when a
    response has no ``\\boxed{}``, take its last number (``"number"``, as SeRL's and
    Qwen2.5-Math's graders do) or give it no answer (``"none"``, stricter).
    """
    if k < 0:
        raise ValueError("k must be >= 0")
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")
    prompts = [build_prompt_ids(p.question, tokenizer, prompt_style, instruction) for p in problems]
    stop = RAW_STOP if prompt_style == "raw" else ()
    records: list[dict] = []
    greedy_ok: list[float] = []
    greedy_none: list[float] = []
    if greedy and problems:
        groups = generate_in_chunks(
            generator, prompts, 1, Sampling(max_new_tokens, 0.0, 1.0, stop=stop), f"{prefix} greedy", chunk, log
        )
        texts = [g[0].text for g in groups]
        answers = [[extract_answer(t, _fallback(p, fallback))] for t, p in zip(texts, problems)]
        ok = _verdicts(problems, answers, checker)
        for p, g, a, v in zip(problems, groups, answers, ok):
            records.append(_record(p, "greedy", 0, g[0], a[0], v[0]))
            greedy_ok.append(float(v[0]))
            greedy_none.append(float(a[0] is None))
    maj_ok: list[float] = []
    passk: list[float] = []
    meank: list[float] = []
    if k > 0 and problems:
        sampling = Sampling(max_new_tokens, temperature, top_p, stop=stop, seed=seed)
        groups = generate_in_chunks(generator, prompts, k, sampling, f"{prefix} sample x{k}", chunk, log)
        answers = [[extract_answer(c.text, _fallback(p, fallback)) for c in g] for g, p in zip(groups, problems)]
        ok = _verdicts(problems, answers, checker)
        for p, g, a, v in zip(problems, groups, answers, ok):
            vote = majority_vote(a, checker)
            # The majority cluster is right when its members are: they are all
            # equivalent to the representative, so one member's verdict decides.
            members = [j for j, r in enumerate(vote.rewards) if r > 0]
            maj_ok.append(float(bool(members) and v[members[0]]))
            passk.append(pass_at_k(len(v), sum(v), k))
            meank.append(mean(map(float, v)))
            for j, (c, aj, vj) in enumerate(zip(g, a, v)):
                rec = _record(p, "sample", j, c, aj, vj)
                rec["in_majority"] = bool(vote.rewards[j] > 0)
                records.append(rec)
    return _summarise(problems, greedy_ok, greedy_none, maj_ok, passk, meank, k, prefix) | {"records": records}


def _record(p: MathProblem, kind: str, j: int, c, answer, correct) -> dict:
    return {
        "benchmark": p.benchmark,
        "idx": p.idx,
        "kind": kind,
        "sample": j,
        "gold": p.gold,
        "answer": answer,
        "correct": bool(correct),
        "response": c.text,
        "finish_reason": c.finish_reason,
        "n_tokens": len(c.token_ids),
        "level": p.level,
        "subject": p.subject,
    }


def _summarise(problems, greedy_ok, greedy_none, maj_ok, passk, meank, k, prefix) -> dict:
    benches: dict[str, list[int]] = {}
    for i, p in enumerate(problems):
        benches.setdefault(p.benchmark, []).append(i)
    metrics, per_bench, items = {}, {}, {}
    for name, idx in benches.items():
        cols: dict[str, list[float]] = {}
        if greedy_ok:
            cols["pass@1"] = [greedy_ok[i] for i in idx]
        if maj_ok:
            cols[f"maj@{k}"] = [maj_ok[i] for i in idx]
            cols[f"pass@{k}"] = [passk[i] for i in idx]
            cols[f"mean@{k}"] = [meank[i] for i in idx]
        entry: dict = {"n": len(idx)} | {key: mean(col) for key, col in cols.items()}
        if greedy_none:
            entry["no_answer@greedy"] = mean(greedy_none[i] for i in idx)
        for key in cols:
            metrics[f"{prefix}/{name}/{key}"] = entry[key]
            # per problem, so two evaluations of the same problems can be compared in pairs
            items[f"{prefix}/{name}/{key}"] = {"ids": [problems[i].idx for i in idx], "values": cols[key]}
        levels = [problems[i].level for i in idx]
        subjects = [problems[i].subject for i in idx]
        if any(x is not None for x in levels):
            entry["by_level"] = breakdown(levels, cols)
        if any(x is not None for x in subjects):
            entry["by_subject"] = breakdown(subjects, cols)
        per_bench[name] = entry
    return {"metrics": metrics, "benchmarks": per_bench, "items": items}
