"""serl.recipes.spell.evaluate: held-out inputs checked up front; the three roles' greedy scores by hand."""

import json
from pathlib import Path

import pytest

from serl import DataError
from serl.recipes.spell.corpus import Cluster
from serl.recipes.spell.evaluate import HeldOut, Roles, evaluate_roles, load_heldout, read_rows

ROOT = Path(__file__).resolve().parents[3]
FILES = {
    "docs": str(ROOT / "dataset/docs_heldout.jsonl"),
    "qa": str(ROOT / "dataset/docs_heldout_qa.jsonl"),
    "verify": str(ROOT / "dataset/docs_heldout_verify.jsonl"),
}


def shipped(**over):
    return load_heldout(**(FILES | over))


@pytest.mark.parametrize("limits,sizes", [((0, 0, 0), (120, 240, 20)), ((5, 7, 2), (5, 7, 2))])
def test_shipped_files_and_limits(limits, sizes):
    held = shipped(qa_limit=limits[0], verify_limit=limits[1], questioner_limit=limits[2])
    assert (len(held.qa), len(held.verify), len(held.clusters)) == sizes
    assert all(len(held.docs[r["cluster"]]) == 6 for r in held.qa)
    assert not HeldOut()


@pytest.mark.parametrize(
    "text,needle",
    [
        ('{"cluster": "heldout-000", "question": "Q?"}\n', "qa.jsonl:1: key 'answer' missing"),
        ('{"cluster": "nowhere", "question": "Q?", "answer": "a"}\n', "qa.jsonl:1: cluster 'nowhere' is not in"),
        ("\n{oops\n", "qa.jsonl:2: not valid JSON"),
        ("", "qa.jsonl: no rows"),
    ],
)
def test_bad_qa_file(tmp_path, text, needle):
    bad = tmp_path / "qa.jsonl"
    bad.write_text(text)
    with pytest.raises(DataError, match=needle.replace("?", r"\?")):
        shipped(qa=str(bad))


def test_verify_labels_must_be_yes_or_no(tmp_path):
    bad = tmp_path / "v.jsonl"
    bad.write_text(json.dumps({"question": "q", "candidate": "a", "gold": "a", "label": "maybe"}) + "\n")
    with pytest.raises(DataError, match="v.jsonl:1: key 'label' must be 'yes' or 'no'"):
        shipped(verify=str(bad))
    assert read_rows(str(bad), ("question",))[0]["line"] == 1


@pytest.mark.parametrize("prefill", ["", "[["])  # with a prefill the model writes only what follows it
def test_scores_by_hand(prefill):
    held = HeldOut(
        docs={"c": ["Ann founded Acme."]},
        qa=[
            {"cluster": "c", "question": "Who founded Acme?", "answer": "Ann", "line": 1},
            {"cluster": "c", "question": "When?", "answer": "1900", "line": 2},
            {"cluster": "c", "question": "Where?", "answer": "Orrin", "line": 3},
        ],
        verify=[
            {"question": "q", "candidate": "x", "gold": "x", "label": "yes", "line": 1},
            {"question": "q", "candidate": "y", "gold": "x", "label": "no", "line": 2},
            {"question": "q", "candidate": "z", "gold": "x", "label": "no", "line": 3},
            {"question": "q", "candidate": "w", "gold": "x", "label": "yes", "line": 4},
        ],
        clusters=[Cluster("c", ["Ann founded Acme."], ["s"]), Cluster("d", ["Orrin is a town."], ["s"])],
    )
    replies = {
        "Who founded Acme?": "The answer is Ann.",  # strict and lenient
        "When?": "It was 1900, I think.",  # lenient only (no answer phrase)
        "Where?": "The answer is Korrin.",  # neither
        "Answer A: x": "[[YES]]",
        "Answer A: y": "[[YES]]",  # right, wrong
        "Answer A: z": "maybe",
        "Answer A: w": "[[YES]]",  # bad format, right
        "Acme": '{"question": "Who founded Acme?", "answer": "Ann"}',
        "Orrin is": "no json here",
    }
    calls = []

    def generate(prompts, max_new_tokens):
        calls.append(max_new_tokens)
        out = []
        for p in prompts:
            if "[1]" not in p and "Who founded Acme?" in p:  # grounding: knows it without documents
                out.append("The answer is Ann.")
                continue
            reply = next(v for k, v in replies.items() if k in p)
            out.append(reply.removeprefix(prefill) if "Answer A:" in p else reply)
        return out

    roles = Roles(
        responder=lambda q, docs: (f"[1] {docs[0]}\n" if docs else "") + f"Question: {q}",
        verifier=lambda q, a, ref: f"Question: {q}\nAnswer A: {a}\nAnswer B: {ref}\n{prefill}",
        questioner=lambda ps: "Documents: " + " ".join(ps),
        parse_question=lambda t: json.loads(t) if t.startswith("{") else None,
        responder_len=40,
        verifier_len=8,
        questioner_len=30,
        paragraphs_per_prompt=2,
        verifier_prefill=prefill,
    )
    m, records = evaluate_roles(generate, roles, None, held)
    assert m == pytest.approx(
        {
            "eval/responder/strict": 1 / 3,
            "eval/responder/lenient": 2 / 3,
            "eval/verifier/accuracy": 2 / 4,
            "eval/verifier/bad_format": 1 / 4,
            "eval/questioner/valid_json": 1 / 2,
            "eval/questioner/bad_ground": 1.0,
        }
    )
    assert calls == [40, 8, 30, 40]
    assert [r["role"] for r in records].count("responder") == 3 and len(records) == 3 + 4 + 1
