import hashlib
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from serl.data.arith import KINDS, efficacy_heldout, guard_probe, make_problems, shipped_problems, spin_splits
from serl.data.seeds import read_seeds
from serl.rewards.extract import last_boxed

DATASET = Path(__file__).resolve().parents[2] / "dataset"
FILES = ["arith_seed.jsonl", "arith_heldout.jsonl", "arith_spin_train.jsonl", "arith_spin_heldout.jsonl"]
# sha256 of [[problem, answer, kind], ...] of the two files as they shipped before the
# solutions were added: adding the solutions must not change a problem, answer or the order
PINNED = {
    "arith_seed.jsonl": "fd4daed6eb011851a57ec92b40dbef76bb34f1b250c46a9277d037c242404e7e",
    "arith_heldout.jsonl": "daabb25b36f5700ee1016a164e8b7c663183d8559af5ce5e679946afda844d61",
}
EQUATION = re.compile(r"(\d+) ([-+*/]) (\d+) = (\d+)")


def rows(name):
    return [json.loads(line) for line in (DATASET / name).read_text().splitlines()]


@pytest.mark.parametrize("name", sorted(PINNED))
def test_shipped_problems_unchanged(name):
    triples = [[r["problem"], r["answer"], r["kind"]] for r in rows(name)]
    assert hashlib.sha256(json.dumps(triples).encode()).hexdigest() == PINNED[name]


@pytest.mark.parametrize("name", FILES + ["arith_efficacy_heldout.jsonl", "arith_guard_probe.jsonl"])
def test_every_solution_is_worked_and_boxed(name):
    ops = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}
    for r in rows(name):
        sol = r["solution"]
        assert sol.endswith(f"The answer is \\boxed{{{r['answer']}}}"), sol
        assert last_boxed(sol) == r["answer"]
        steps = EQUATION.findall(sol)
        assert steps, sol  # at least one written step, each one correct
        for a, op, b, c in steps:
            assert ops[op](int(a), int(b)) == int(c), sol
        assert steps[-1][3] == r["answer"]  # the last step's result is the answer


def test_spin_files_match_the_generator_and_are_disjoint():
    train, heldout = spin_splits()
    assert rows("arith_spin_train.jsonl") == train and len(train) == 256
    assert rows("arith_spin_heldout.jsonl") == heldout and len(heldout) >= 200
    texts = [{r["problem"] for r in rows(name)} for name in FILES]
    assert [len(t) for t in texts] == [200, 64, 256, 256]  # no duplicates inside a file
    for i in range(4):
        for j in range(i + 1, 4):
            assert not texts[i] & texts[j], (FILES[i], FILES[j])
    assert shipped_problems() == texts[0] | texts[1]
    # exclusion happens inside the generator, so the six templates still take turns:
    # 256 = 6 * 42 + 4 -> the first four templates 43 times, the other two 42
    kinds = Counter(r["kind"] for r in train)
    assert sorted(kinds.values()) == [42, 42, 43, 43, 43, 43] and len(kinds) == len(KINDS)


def test_exclude_keeps_the_template_order():
    first = make_problems(12, seed=5)
    skipped = make_problems(12, seed=5, exclude={first[0]["problem"]})
    assert skipped[0]["kind"] == "add" and skipped[0]["problem"] != first[0]["problem"]
    assert [r["kind"] for r in skipped] == [r["kind"] for r in first]


def test_spin_train_reads_with_output_key():
    probs = read_seeds(DATASET / "arith_spin_train.jsonl", output_key="solution")
    assert len(probs) == 256 and all(p.solution.endswith(f"\\boxed{{{p.label}}}") for p in probs)


def test_efficacy_heldout_matches_the_generator_and_is_disjoint():
    held = rows("arith_efficacy_heldout.jsonl")
    assert held == efficacy_heldout() and len(held) == 256
    texts = {r["problem"] for r in held}
    assert len(texts) == 256
    for name in FILES:  # every training and evaluation file shipped before it
        assert not texts & {r["problem"] for r in rows(name)}, name
    kinds = Counter(r["kind"] for r in held)  # 256 = 6 * 42 + 4, templates in turn
    assert sorted(kinds.values()) == [42, 42, 43, 43, 43, 43]


def test_guard_probe_matches_the_generator_and_is_disjoint():
    probe = rows("arith_guard_probe.jsonl")
    assert probe == guard_probe() and len(probe) == 512
    texts = {r["problem"] for r in probe}
    assert len(texts) == 512
    for name in FILES + ["arith_efficacy_heldout.jsonl"]:  # no training, held-out or evaluation problem
        assert not texts & {r["problem"] for r in rows(name)}, name
    kinds = Counter(r["kind"] for r in probe)  # 512 = 6 * 85 + 2, templates in turn
    assert sorted(kinds.values()) == [85, 85, 85, 85, 86, 86]
