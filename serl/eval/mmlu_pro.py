"""MMLU-Pro: 5-shot chain-of-thought, accuracy per category and per group.

The prompt follows the format of the official MMLU-Pro evaluation (TIGER-Lab,
Wang et al. 2024): a header asking to finish with "the answer is (X)", then up to
five worked examples of the same category from the validation split, then the
question with "Answer: Let's think step by step." Shots are dropped, last first,
until the prompt fits the token budget.

Differences from the reference, on purpose:
* an unanswered question counts as wrong (the reference picks a random option);
* each extraction pattern takes its *last* match (the model's final statement).

The official last fallback, the last standalone capital A-J, also reads the
article "A" and the pronoun "I" as answers.  It stays in the headline numbers
(``pass@1``, ``maj@K``, ...) so they compare with published ones; next to them
``strict_pass@1`` / ``strict_mean@K`` count only answers stated with "answer is
(X)" or "Answer: X", and ``fallback@1`` / ``fallback@K`` give the share of
answers that only the fallback decided.  A weak model near chance (10 %) with a
large fallback share is mostly being scored on stray letters.
"""

from __future__ import annotations

import re
from collections import defaultdict

from serl.data.lengths import PromptBudget
from serl.engines.base import Sampling
from serl.eval.data import MMLUQuestion
from serl.eval.metrics import generate_in_chunks, mean, pass_at_k
from serl.models.chat import text_ids, user_ids
from serl.rewards import majority_vote

LETTERS = "ABCDEFGHIJ"
GROUPS = {
    "STEM": ("biology", "chemistry", "computer science", "engineering", "math", "physics"),
    "Humanities": ("history", "law", "philosophy"),
    "Social": ("business", "economics", "health", "psychology"),
    "Other": ("other",),
}
RAW_STOP = ("Question:",)  # a raw prompt would otherwise run on into a new question

_ANSWER_IS = re.compile(r"answer is \(?([A-J])\)?")
_ANSWER_COLON = re.compile(r"[aA]nswer:\s*\(?([A-J])\b")
_LONE_LETTER = re.compile(r"\b([A-J])\b")


_RULES = (("answer_is", _ANSWER_IS), ("answer_colon", _ANSWER_COLON), ("fallback", _LONE_LETTER))


def extract_choice_rule(text: str) -> tuple[str | None, str | None]:
    """(letter, rule that found it): "answer_is", "answer_colon" or "fallback"; (None, None)."""
    for rule, pattern in _RULES:
        hits = pattern.findall(text)
        if hits:
            return hits[-1], rule
    return None, None


def extract_choice(text: str, strict: bool = False) -> str | None:
    """ "answer is (X)" -> "Answer: X" -> the last standalone letter A-J (the official
    protocol); ``strict`` drops that last fallback. None when nothing matches."""
    letter, rule = extract_choice_rule(text)
    return None if strict and rule == "fallback" else letter


def _header(category: str) -> str:
    return (
        f"The following are multiple choice questions (with answers) about {category}. "
        'Think step by step and then finish your answer with "the answer is (X)" '
        "where X is the correct letter choice.\n\n\n"
    )


def format_question(q: MMLUQuestion, with_answer: bool) -> str:
    lines = ["Question:", q.question, "Options:"]
    lines += [f"{LETTERS[i]}. {opt}" for i, opt in enumerate(q.options)]
    text = "\n".join(lines) + "\n"
    if with_answer:
        cot = q.cot_content.replace("A: Let's think step by step.", "Answer: Let's think step by step.", 1)
        return text + cot + "\n\n"
    return text + "Answer: Let's think step by step."


def shots_by_category(validation: list[MMLUQuestion], n_shots: int = 5) -> dict[str, list[MMLUQuestion]]:
    out: dict[str, list[MMLUQuestion]] = defaultdict(list)
    for q in validation:
        if len(out[q.category]) < n_shots:
            out[q.category].append(q)
    return dict(out)


def build_prompt(
    q: MMLUQuestion,
    shots: list[MMLUQuestion],
    tokenizer,
    style: str = "chat_boxed",
    max_prompt_tokens: int | None = None,
) -> tuple[list[int], int, int | None]:
    """(prompt token ids, shots used, prompt tokens): drop shots until it fits the budget.

    ``raw`` feeds the text as it is (as the reference does); ``chat``/``chat_boxed``
    put it in the user turn of the chat template (the answer-format instruction is in
    the header already, so the two are the same here).
    """

    # the questions are plain text (serl.models.chat): special-token strings in them stay text
    def encode(body: str) -> list[int]:
        return text_ids(tokenizer, body) if style == "raw" else user_ids(tokenizer, body)

    budget = None if max_prompt_tokens is None else PromptBudget(tokenizer, max_prompt_tokens)
    prompt, n_tokens = [], None
    for used in range(len(shots), -1, -1):
        body = _header(q.category) + "".join(format_question(s, True) for s in shots[:used])
        body += format_question(q, False)
        if budget is None:
            prompt = encode(body)
            return prompt, used, len(prompt)
        ids = budget.encode(body, encode)  # None: so long it is not even tokenized
        if ids is not None:
            prompt, n_tokens = ids, len(ids)
            if n_tokens <= budget.max_tokens:
                return prompt, used, n_tokens
    return prompt, 0, n_tokens  # over budget even with no shots: caller skips it (None: not counted)


def stratified(questions: list[MMLUQuestion], n: int) -> list[MMLUQuestion]:
    """n questions spread evenly over categories (sorted by name; the first n mod C
    categories get one more), evenly spaced inside each category in file order.
    Deterministic: no random numbers."""
    by_cat: dict[str, list[MMLUQuestion]] = defaultdict(list)
    for q in questions:
        by_cat[q.category].append(q)
    cats = sorted(by_cat)
    want = {c: n // len(cats) + (1 if i < n % len(cats) else 0) for i, c in enumerate(cats)}
    # A small category gives what it has; the rest goes to the others in turn.
    spare = sum(max(0, want[c] - len(by_cat[c])) for c in cats)
    want = {c: min(want[c], len(by_cat[c])) for c in cats}
    while spare > 0 and any(want[c] < len(by_cat[c]) for c in cats):
        for c in cats:
            if spare and want[c] < len(by_cat[c]):
                want[c] += 1
                spare -= 1
    picked = []
    for c in cats:
        pool, m = by_cat[c], want[c]
        picked += [pool[(2 * i + 1) * len(pool) // (2 * m)] for i in range(m)]
    return picked


def group_of(category: str) -> str:
    for group, cats in GROUPS.items():
        if category in cats:
            return group
    return "Other"


def evaluate_mmlu_pro(
    generator,
    tokenizer,
    questions: list[MMLUQuestion],
    validation: list[MMLUQuestion],
    k: int = 8,
    *,
    checker=None,
    greedy: bool = True,
    n_shots: int = 5,
    max_new_tokens: int = 1024,
    max_prompt_tokens: int | None = None,
    temperature: float = 1.0,
    top_p: float = 0.95,
    prompt_style: str = "chat_boxed",
    seed: int | None = None,
    prefix: str = "eval",
    chunk: int = 64,
    log=None,
) -> dict:
    """Same return shape as ``evaluate_math``; benchmark name ``mmlu_pro``, with
    ``by_category`` and ``by_group`` (counts-weighted) breakdowns. maj@K votes with
    ``majority_vote`` (needs ``checker``) over the extracted letters. Besides the
    official-protocol columns: ``strict_pass@1``, ``fallback@1`` (greedy) and
    ``strict_mean@K``, ``fallback@K`` (samples); see the module doc."""
    shots = shots_by_category(validation, n_shots)
    built = [build_prompt(q, shots.get(q.category, []), tokenizer, prompt_style, max_prompt_tokens) for q in questions]
    fits = [max_prompt_tokens is None or (b[2] is not None and b[2] <= max_prompt_tokens) for b in built]
    todo = [i for i, ok in enumerate(fits) if ok]
    prompts = [built[i][0] for i in todo]
    stop = RAW_STOP if prompt_style == "raw" else ()
    records: list[dict] = []
    cols: dict[str, list[float]] = {}

    def run(n, sampling, label):
        groups = generate_in_chunks(generator, prompts, n, sampling, label, chunk, log) if prompts else []
        full: list = [None] * len(questions)
        for i, g in zip(todo, groups):
            full[i] = g
        return full

    def record(i, kind, j, c, letter, rule, ok):
        q = questions[i]
        return {
            "benchmark": "mmlu_pro",
            "idx": q.question_id,
            "kind": kind,
            "sample": j,
            "category": q.category,
            "gold": q.answer,
            "answer": letter,
            "extracted_by": rule,
            "correct": ok,
            "shots": built[i][1],
            "prompt_tokens": built[i][2],
            "response": c.text if c else None,
            "finish_reason": c.finish_reason if c else "prompt_too_long",
            "n_tokens": len(c.token_ids) if c else 0,
        }

    if greedy:
        groups = run(1, Sampling(max_new_tokens, 0.0, 1.0, stop=stop), f"{prefix} mmlu_pro greedy")
        col, strict, fell = [], [], []
        for i, g in enumerate(groups):
            letter, rule = extract_choice_rule(g[0].text) if g else (None, None)
            ok = letter == questions[i].answer
            col.append(float(ok))
            strict.append(float(ok and rule != "fallback"))
            fell.append(float(rule == "fallback"))
            records.append(record(i, "greedy", 0, g[0] if g else None, letter, rule, ok))
        cols |= {"pass@1": col, "strict_pass@1": strict, "fallback@1": fell}
    if k > 0:
        if checker is None:
            raise ValueError("maj@K needs an EquivalenceChecker")
        groups = run(
            k, Sampling(max_new_tokens, temperature, top_p, stop=stop, seed=seed), f"{prefix} mmlu_pro sample x{k}"
        )
        maj, pk, mk, smk, fk = [], [], [], [], []
        for i, g in enumerate(groups):
            gold = questions[i].answer
            found = [extract_choice_rule(c.text) for c in g] if g else [(None, None)] * k
            letters = [x for x, _ in found]
            oks = [x == gold for x in letters]
            smk.append(mean(float(ok and r != "fallback") for ok, (_, r) in zip(oks, found)))
            fk.append(mean(float(r == "fallback") for _, r in found))
            vote = majority_vote(letters, checker)
            maj.append(float(vote.label == gold))
            pk.append(pass_at_k(k, sum(oks), k))
            mk.append(mean(map(float, oks)))
            for j in range(k):
                rec = record(i, "sample", j, g[j] if g else None, letters[j], found[j][1], oks[j])
                rec["in_majority"] = bool(vote.rewards[j] > 0)
                records.append(rec)
        cols |= {f"maj@{k}": maj, f"pass@{k}": pk, f"mean@{k}": mk, f"strict_mean@{k}": smk, f"fallback@{k}": fk}
    return _summarise(questions, cols, fits, prefix) | {"records": records}


def _summarise(questions, cols, fits, prefix) -> dict:
    entry: dict = {"n": len(questions), "skipped_prompt_too_long": sum(not f for f in fits)}
    entry |= {key: mean(col) for key, col in cols.items()}
    by_cat: dict[str, list[int]] = defaultdict(list)
    for i, q in enumerate(questions):
        by_cat[q.category].append(i)
    entry["by_category"] = {
        c: {"n": len(ix)} | {key: mean(col[i] for i in ix) for key, col in cols.items()}
        for c, ix in sorted(by_cat.items())
    }
    by_group = {}
    for group in GROUPS:
        ix = [i for i, q in enumerate(questions) if group_of(q.category) == group]
        if ix:  # the mean over all its questions = categories weighted by their counts
            by_group[group] = {"n": len(ix)} | {key: mean(col[i] for i in ix) for key, col in cols.items()}
    entry["by_group"] = by_group
    metrics = {f"{prefix}/mmlu_pro/{key}": entry[key] for key in cols}
    return {"metrics": metrics, "benchmarks": {"mmlu_pro": entry}}
