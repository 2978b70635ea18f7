"""Labelled verifier pairs for SPELL's warm-up: labels from the caller's rule score, errors naming
file, line and key, held-out questions refused, and balanced draws that resume."""

import json
import random
from pathlib import Path

import pytest

from serl import DataError
from serl.recipes.spell.qa import cover_em_many
from serl.recipes.spell.verify_pairs import Balanced, Pair, read_pairs

ROOT = Path(__file__).resolve().parents[3]


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_labels_are_the_rule_score_not_the_file(tmp_path):
    rows = [
        {"question": "Q1", "candidate": "It was 1881.", "gold": "1881", "label": "no"},  # file says no: rule says 1
        {"question": "Q2", "candidate": "Brelby", "gold": "Dreiholt"},
    ]
    pairs = read_pairs(write(tmp_path / "p.jsonl", rows), cover_em_many)
    assert [p.label for p in pairs] == [1.0, 0.0] and pairs[0] == Pair("Q1", "It was 1881.", "1881", 1.0)


def test_shipped_pairs_are_balanced_and_not_held_out():
    pairs = read_pairs(
        str(ROOT / "dataset/docs_train_verify.jsonl"),
        cover_em_many,
        heldout=str(ROOT / "dataset/docs_heldout_verify.jsonl"),
    )
    assert len(pairs) == 576 and sum(p.label for p in pairs) == 288


@pytest.mark.parametrize(
    "text,msg",
    [
        ('{"question": "Q", "candidate": "a"}\n', "p.jsonl:1: key 'gold' missing"),
        ('{"question": "Q", "candidate": "a", "gold": "a"}\n[1]\n', "p.jsonl:2: expected a JSON object"),
        ('{"question": "Q", "candidate": "a", "gold": ""}\n', "p.jsonl:1: key 'gold'"),
        ("", "no rows"),
    ],
)
def test_bad_files_name_file_line_and_key(tmp_path, text, msg):
    (tmp_path / "p.jsonl").write_text(text)
    with pytest.raises(DataError, match=msg):
        read_pairs(str(tmp_path / "p.jsonl"), cover_em_many)


def test_held_out_question_refused(tmp_path):
    held = write(tmp_path / "held.jsonl", [{"question": "Who founded X?"}])
    p = write(
        tmp_path / "p.jsonl",
        [
            {"question": "Q", "candidate": "a", "gold": "a"},
            {"question": " Who founded X? ", "candidate": "a", "gold": "b"},
        ],
    )
    with pytest.raises(DataError, match=r"p.jsonl:2: question 'Who founded X\?' is one of the held-out"):
        read_pairs(p, cover_em_many, heldout=held)


def test_balanced_draws_alternate_classes_and_resume():
    pairs = [Pair(f"r{i}", "a", "a", 1.0) for i in range(3)] + [Pair(f"w{i}", "b", "a", 0.0) for i in range(2)]
    rng = random.Random(0)
    b = Balanced(pairs, rng)
    first = b.take(4)
    assert [p.label for p in first] == [1.0, 0.0, 1.0, 0.0]
    assert {p.question for p in first[1::2]} == {"w0", "w1"}  # one whole pass over the wrong ones
    # a resume: the passes' state (the checkpoint's recipe state) and the RNG's (serl.run.state)
    state, rng_state = json.loads(json.dumps(b.state_dict())), rng.getstate()
    twin_rng = random.Random(5)
    twin = Balanced(pairs, twin_rng)
    twin.load_state_dict(state)
    twin_rng.setstate(rng_state)
    rest = b.take(6)
    assert rest == twin.take(6)
    assert {p.question for p in first[::2] + rest[:1]} == {"r0", "r1", "r2"}  # the first pass of the right ones
    with pytest.raises(DataError, match="1 right and 0 wrong"):
        Balanced(pairs[:1], random.Random(0))
