import json
from pathlib import Path

import pytest

from serl.recipes.spell.docs import FILES, make_corpus, write
from serl.recipes.spell.qa import cover_em

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def corpus():
    return make_corpus()


def test_seeded():
    a, b = make_corpus(4, 3, seed=7), make_corpus(4, 3, seed=7)
    assert a == b
    assert make_corpus(4, 3, seed=8)["train"] != a["train"]


def test_shipped_files_match_the_generator(tmp_path):
    write(tmp_path)
    total = 0
    for name in FILES.values():
        shipped = (ROOT / "dataset" / name).read_bytes()
        assert shipped == (tmp_path / name).read_bytes(), (
            f"dataset/{name} is stale: run python -m serl.recipes.spell.docs"
        )
        total += len(shipped)
    assert total < 400_000


def test_sizes_and_balance(corpus):
    assert len(corpus["qa"]) >= 100 and len(corpus["verify"]) >= 200
    labels = [r["label"] for r in corpus["verify"]]
    assert labels.count("yes") == labels.count("no") == len(labels) // 2
    hops = [r["hops"] for r in corpus["qa"]]
    assert hops.count(1) == hops.count(2) == len(hops) // 2


def test_clusters_have_four_linked_docs_and_two_distractors(corpus):
    by_cluster = {}
    for d in corpus["train"] + corpus["heldout"]:
        by_cluster.setdefault(d["cluster"], []).append(d)
    assert len(by_cluster) == 48 + 20
    for docs in by_cluster.values():
        assert len(docs) == 6 and sum(d["distractor"] for d in docs) == 2
        assert sorted(d["kind"] for d in docs) == ["company", "company", "person", "person", "town", "town"]


def test_heldout_entities_are_disjoint_from_training(corpus):
    train_titles = {d["title"] for d in corpus["train"]}
    held_titles = {d["title"] for d in corpus["heldout"]}
    assert not train_titles & held_titles
    train_words = set(" ".join(d["text"] for d in corpus["train"]).replace(".", " ").split())
    # the invented word of each name: a town's name, a company's first word, a person's surname
    marks = {d["title"].split()[{"town": 0, "company": 0, "person": -1}[d["kind"]]] for d in corpus["heldout"]}
    assert len(marks) == len(held_titles)
    assert not marks & train_words


def test_answers_sit_in_their_evidence_and_two_hop_needs_both(corpus):
    docs = {d["doc"]: d for d in corpus["heldout"]}
    for q in corpus["qa"]:
        ev = [docs[i] for i in q["evidence"]]
        assert len(ev) == q["hops"] and all(d["cluster"] == q["cluster"] and not d["distractor"] for d in ev)
        assert cover_em(ev[-1]["text"], q["answer"]) == 1.0, q
        if q["hops"] == 2:
            assert cover_em(ev[0]["text"], q["answer"]) == 0.0, q  # the first document alone does not give it
            assert ev[-1]["title"] not in q["question"]


def test_verifier_labels_agree_with_cover_em(corpus):
    for r in corpus["verify"] + corpus["train_verify"]:
        assert cover_em(r["candidate"], r["gold"]) == (1.0 if r["label"] == "yes" else 0.0), r


def test_training_side_verifier_items_are_on_training_clusters_only(corpus):
    """The warm-up's labelled pairs: 12 per training cluster, half yes, none about a held-out world."""
    items = corpus["train_verify"]
    assert len(items) == 48 * 12 and sum(r["label"] == "yes" for r in items) == len(items) // 2
    assert {r["cluster"] for r in items} == {d["cluster"] for d in corpus["train"]}
    held = {d["title"] for d in corpus["heldout"]}  # names are unique across the splits
    assert not any(t in r["question"] or t in r["candidate"] for r in items for t in held)
    assert any(d["title"] in items[0]["question"] for d in corpus["train"] if d["cluster"] == items[0]["cluster"])


def test_rows_are_json_lines_with_documented_keys():
    for name, keys in [
        ("docs_train.jsonl", {"cluster", "doc", "kind", "distractor", "title", "text"}),
        ("docs_heldout_qa.jsonl", {"cluster", "question", "answer", "hops", "kind", "evidence"}),
        ("docs_heldout_verify.jsonl", {"cluster", "question", "candidate", "gold", "label", "kind"}),
        ("docs_train_verify.jsonl", {"cluster", "question", "candidate", "gold", "label", "kind"}),
    ]:
        for line in (ROOT / "dataset" / name).read_text().splitlines():
            assert set(json.loads(line)) == keys
