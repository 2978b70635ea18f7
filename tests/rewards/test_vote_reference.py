"""Every majority vote against a brute-force pairwise reference, on generated groups.

The reference knows nothing of serl's extraction or clustering: it is told by the
generator which answers are empty forms (no answer), and asks math-verify itself
whether two answers are equal, for every pair (O(n^2)). Each answer's support is the
number of answers equal to it; the earliest answer with the largest support wins, and
the answers equal to it get reward 1. The groups mix empty forms, equivalent and
distinct numbers and responses with no answer at all, and go through each place a
vote is taken: training (``score_groups``), ``serl serve-reward`` over HTTP, the
``reward_utils`` files, and maj@K evaluation (``evaluate_math``, ``maj_at_k``).
"""

import importlib.util
import json
import random
import threading
import urllib.request
from pathlib import Path

import pytest

from serl.engines.base import Completion
from serl.eval.data import MathProblem
from serl.eval.math_bench import evaluate_math
from serl.rewards import maj_at_k, score_groups
from serl.rewards.server import RewardService, make_server

# Forms with nothing a reader would see in them: never an answer.
EMPTY = ["\\text{}", ".", "$$", " ", "\\,", "{}", "\\mathrm{}", "~", "\\quad", "\\text{\\,}", "\\boxed{}", ".."]
# Real answers; math-verify groups them as 1/2 | 3 | 7 | -2 | 1/4 | 2 | x+1 | the empty set.
VALUES = [
    "1/2",
    "0.5",
    "\\frac{1}{2}",
    "\\frac12",
    "3",
    "3.0",
    "7",
    "-2",
    "0.25",
    "\\frac{1}{4}",
    "\\sqrt{4}",
    "2",
    "x+1",
    "1+x",
    "\\{\\}",
    "\\emptyset",
]
NO_ANSWER = ["no idea", "I cannot tell."]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def same():
    """math-verify's verdict for every pair of VALUES (each answer parsed once)."""
    mv = pytest.importorskip("math_verify")
    parsed = {v: mv.parse("\\boxed{" + v + "}") for v in VALUES}
    table = {(a, b): bool(mv.verify(parsed[a], parsed[b])) for a in VALUES for b in VALUES}
    # the reference's tie rule needs an equivalence relation: check that math-verify gives one here
    for a in VALUES:
        assert table[a, a]
        for b in VALUES:
            assert table[a, b] == table[b, a]
            assert all(table[a, c] for c in VALUES if table[a, b] and table[b, c])
    return table


def generate(n_groups, sizes, seed):
    """Groups of (response text, answer or None); None = empty form or no answer."""
    rng = random.Random(seed)
    groups = []
    for _ in range(n_groups):
        n = rng.choice(sizes)
        values = rng.sample(VALUES, rng.randint(1, 4))  # a few candidates per group, so clusters form
        group = []
        for _ in range(n):
            kind = rng.random()
            if kind < 0.4:
                group.append((f"so \\boxed{{{rng.choice(EMPTY)}}}", None))
            elif kind < 0.85:
                v = rng.choice(values)
                group.append((f"Thus \\boxed{{{v}}}.", v))
            else:
                group.append((rng.choice(NO_ANSWER), None))
        groups.append(group)
    return groups


def reference_vote(answers, same):
    """Brute force: support of each answer over all pairs; the earliest best wins."""
    n = len(answers)
    eq = [[a is not None and b is not None and same[a, b] for b in answers] for a in answers]
    support = [sum(row) for row in eq]
    best = max(support, default=0)
    classes = {frozenset(j for j in range(n) if eq[i][j]) for i in range(n) if answers[i] is not None}
    if best == 0:
        return {"rewards": [0.0] * n, "label": None, "agreement": 0.0, "n_clusters": 0, "n_no_answer": n, "tie": False}
    winner = support.index(best)
    return {
        "rewards": [1.0 if eq[winner][j] else 0.0 for j in range(n)],
        "label": answers[winner],
        "agreement": best / n,
        "n_clusters": len(classes),
        "n_no_answer": sum(a is None for a in answers),
        "tie": sum(len(c) == best for c in classes) > 1,
    }


def test_the_issue_example(checker, same):
    group = [(f"\\boxed{{{x}}}", None) for x in ("\\text{}", ".", "$$")] + [
        ("\\boxed{1/2}", "1/2"),
        ("\\boxed{0.5}", "0.5"),
    ]
    (g,) = score_groups([[t for t, _ in group]], None, checker)
    assert g.rewards == [0.0, 0.0, 0.0, 1.0, 1.0] == reference_vote([a for _, a in group], same)["rewards"]
    assert (g.label, g.agreement, g.n_no_answer) == ("1/2", 0.4, 3)


def test_training_vote(checker, same):
    groups = generate(400, range(1, 9), seed=1)
    scores = score_groups([[t for t, _ in g] for g in groups], None, checker)
    for g, s in zip(groups, scores):
        ref = reference_vote([a for _, a in g], same)
        got = {k: getattr(s, k) for k in ref}
        assert got == ref, [t for t, _ in g]


def test_serve_reward_over_http(checker, same):
    groups = generate(150, range(1, 9), seed=2)
    server = make_server(RewardService(checker), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        prompts = [f"Problem {i}: what is it?\n" for i, g in enumerate(groups) for _ in g]
        texts = [t for g in groups for t, _ in g]
        body = json.dumps(
            {"query": [p + t for p, t in zip(prompts, texts)], "prompts": prompts, "labels": [None] * len(texts)}
        ).encode()
        url = f"http://127.0.0.1:{server.server_address[1]}/get_reward"
        with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=60) as r:
            out = json.loads(r.read())
    finally:
        server.shutdown()
        server.server_close()
    k = 0
    for g in groups:
        ref = reference_vote([a for _, a in g], same)
        n = len(g)
        assert out["rewards"][k : k + n] == ref["rewards"]
        assert out["extra_logs"]["no_answer"][k : k + n] == [int(a is None) for _, a in g]
        assert out["extra_logs"]["agreement"][k : k + n] == pytest.approx([ref["agreement"]] * n)
        assert out["extra_logs"]["n_clusters"][k : k + n] == [ref["n_clusters"]] * n
        k += n


def _load(name, checker, monkeypatch):
    spec = importlib.util.spec_from_file_location("reward_func", ROOT / "reward_utils" / name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import serl_reward_common  # put on sys.path by the file itself

    monkeypatch.setattr(serl_reward_common, "_checker", checker)  # the session's pool, not a new one
    return mod.reward_func


def test_reward_utils_files(checker, same, monkeypatch):
    monkeypatch.delenv("SERL_REWARD_URL", raising=False)
    groups = generate(150, range(2, 9), seed=3)
    prompts = [f"Problem {i}\n" for i, g in enumerate(groups) for _ in g]
    queries = [p + t for p, (t, _) in zip(prompts, [x for g in groups for x in g])]
    out = _load("majority_vote_reward.py", checker, monkeypatch)(queries, prompts, [None] * len(queries))
    expected = [r for g in groups for r in reference_vote([a for _, a in g], same)["rewards"]]
    assert out["rewards"].tolist() == expected
    # the rule file: an empty form never matches a label, not even an empty one
    answers = [a for g in groups for _, a in g]
    golds = ["1/2", "\\text{}", "3"] * (len(answers) // 3 + 1)
    out = _load("math_rule_reward.py", checker, monkeypatch)(queries, prompts, golds[: len(queries)])
    assert out["rewards"].tolist() == [
        float(a is not None and g != "\\text{}" and same[g, a]) for a, g in zip(answers, golds)
    ]
    assert out["extra_logs"]["no_answer"].tolist() == [float(a is None) for a in answers]


class _Scripted:
    """A generator that returns the written samples of each prompt."""

    def __init__(self, samples, tok):
        self.samples, self.tok = samples, tok

    def generate(self, prompts, n, sampling):  # prompts arrive as ids (serl.models.chat)
        return [
            [Completion(text=t, token_ids=[1], prompt_ids=list(p)) for t in self.samples[self.tok.decode(p)][:n]]
            for p in prompts
        ]


def test_maj_at_k_evaluation(checker, same, smol_tokenizer):
    k = 6
    groups = generate(120, [k], seed=4)
    rng = random.Random(5)
    golds = [rng.choice(VALUES) for _ in groups]
    problems = [MathProblem(f"b{i}", i, f"question {i}", gold) for i, gold in enumerate(golds)]
    gen = _Scripted({p.question: [t for t, _ in g] for p, g in zip(problems, groups)}, smol_tokenizer)
    out = evaluate_math(gen, smol_tokenizer, problems, k=k, checker=checker, greedy=False, prompt_style="raw", log=None)
    refs = [reference_vote([a for _, a in g], same) for g in groups]
    solved = [ref["label"] is not None and same[gold, ref["label"]] for ref, gold in zip(refs, golds)]
    assert [out["metrics"][f"eval/b{i}/maj@{k}"] for i in range(len(groups))] == [float(s) for s in solved]
    in_majority = [[r["in_majority"] for r in out["records"] if r["idx"] == i] for i in range(len(groups))]
    assert in_majority == [[bool(x) for x in ref["rewards"]] for ref in refs]
    # the library's maj_at_k on the extracted answers agrees (empty forms handed to it directly)
    raw = [[t.split("{", 1)[1].rsplit("}", 1)[0] if "boxed" in t else None for t, _ in g] for g in groups]
    assert maj_at_k(raw, golds, checker) == solved
