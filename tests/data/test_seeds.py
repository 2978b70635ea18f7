import json

import pytest

from serl.data.arith import make_problems
from serl.data.seeds import DataError, read_seeds

SHARED_SEED = "../shared/data/serl_seed/0_2_0_8_train_with_idx_sample_500.jsonl"


def write(tmp_path, text, name="seeds.jsonl"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_reads_keys_and_labels(tmp_path):
    p = write(tmp_path, '{"q": "What is 2+3?", "a": 5}\n\n{"q": "What is 1+1?"}\n')
    probs = read_seeds(p, input_key="q", label_key="a")
    assert [x.text for x in probs] == ["What is 2+3?", "What is 1+1?"]
    assert [x.label for x in probs] == ["5", None]


@pytest.mark.parametrize("content,needle", [
    ('{"problem": "ok"}\n{not json}\n', ":2: not valid JSON"),
    ('{"problem": "ok"}\n{"question": "x"}\n', ":2: missing key 'problem'"),
    ('{"problem": ""}\n', ":1: key 'problem' must be a non-empty string"),
    ('[1, 2]\n', ":1: expected a JSON object"),
    ("\n\n", "no seed problems"),
])
def test_bad_files_name_file_line_key(tmp_path, content, needle):
    p = write(tmp_path, content)
    with pytest.raises(DataError) as e:
        read_seeds(p)
    assert str(p) in str(e.value) and needle in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="seed file not found"):
        read_seeds(tmp_path / "nope.jsonl")


def test_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow", reason="pyarrow not installed")
    import pyarrow.parquet as pq

    p = tmp_path / "s.parquet"
    pq.write_table(pa.table({"problem": ["a b c d", "e f g h"], "answer": ["1", "2"]}), p)
    assert [x.label for x in read_seeds(p)] == ["1", "2"]


def test_shared_serl_seed_file_reads_unchanged():
    import pathlib

    p = pathlib.Path(__file__).resolve().parents[2] / SHARED_SEED
    if not p.exists():
        pytest.skip("shared data not beside the checkout")
    probs = read_seeds(p, input_key="problem", label_key="answer")
    assert len(probs) == 500 and all(x.text for x in probs)


def test_arith_generator_is_deterministic_and_exact():
    a, b = make_problems(50, seed=7), make_problems(50, seed=7)
    assert a == b and len({r["problem"] for r in a}) == 50
    for r in a:  # answers are exact integers that the text supports
        assert int(r["answer"]) >= 0


def test_shipped_seed_file_matches_generator():
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2] / "dataset"
    rows = [json.loads(l) for l in (root / "arith_seed.jsonl").read_text().splitlines()]
    assert rows == make_problems(200)
    held = [json.loads(l)["problem"] for l in (root / "arith_heldout.jsonl").read_text().splitlines()]
    assert not set(held) & {r["problem"] for r in rows}
