import json

import pytest

from serl import DataError
from serl.data.arith import make_problems
from serl.data.seeds import read_seeds

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


@pytest.mark.parametrize(
    "content,needle",
    [
        ('{"problem": "ok"}\n{not json}\n', ":2: not valid JSON"),
        ('{"problem": "ok"}\n{"question": "x"}\n', ":2: missing key 'problem'"),
        ('{"problem": ""}\n', ":1: key 'problem' must be a non-empty string"),
        ("[1, 2]\n", ":1: expected a JSON object"),
        ("\n\n", "no seed problems"),
        # a list, an object or true as label became Python text ("[1, 'x']") that no answer matches
        (
            '{"problem": "ok", "answer": "1"}\n{"problem": "p", "answer": [1, "x"]}\n',
            ":2: key 'answer' is a list ([1, \"x\"]); a label must be a string or a number",
        ),
        ('{"problem": "p", "answer": {"v": 1}}\n', ":1: key 'answer' is an object ({\"v\": 1})"),
        ('{"problem": "p", "answer": true}\n', ":1: key 'answer' is true/false (true)"),
    ],
)
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
    rows = [json.loads(ln) for ln in (root / "arith_seed.jsonl").read_text().splitlines()]
    assert rows == make_problems(200)
    held = [json.loads(ln)["problem"] for ln in (root / "arith_heldout.jsonl").read_text().splitlines()]
    assert not set(held) & {r["problem"] for r in rows}


# ---- human answers (--output_key) and GSM8K's "#### n" ----------------------------------

from serl.data.seeds import gsm8k_final_answer, gsm8k_to_boxed  # noqa: E402

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"


@pytest.mark.parametrize(
    "text,boxed,final",
    [
        # the first GSM8K training answer: annotations <<48/2=24>> dropped, marker boxed
        (
            "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
            "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
            "Natalia sold 48/2 = 24 clips in May.\n"
            "Natalia sold 48+24 = 72 clips altogether in April and May.\n\\boxed{72}",
            "72",
        ),
        ("So 3 - 5 = -2.\n####   -2  \n", "So 3 - 5 = -2.\n\\boxed{-2}", "-2"),  # spaces trimmed
        ("#### 1,600", "\\boxed{1,600}", "1,600"),  # marker alone
        ("It is 7. \\boxed{7}", "It is 7. \\boxed{7}", None),  # no marker: as is
        ("#### 3\nthen more text", "#### 3\nthen more text", None),  # not the last line
        ("a <<1+1=2>>2 stays when there is no marker", "a <<1+1=2>>2 stays when there is no marker", None),
    ],
)
def test_gsm8k_to_boxed(text, boxed, final):
    assert gsm8k_to_boxed(text) == boxed
    assert gsm8k_final_answer(text) == final


def test_output_key_reads_solutions(tmp_path):
    p = write(
        tmp_path,
        '{"q": "What is 2+3?", "a": "5", "sol": "2+3=5, so \\\\boxed{5}"}\n'
        '{"q": "What is 6*7?", "a": "#### 42", "sol": "6*7 = <<6*7=42>>42\\n#### 42",'
        ' "src": "gsm8k"}\n'
        '{"q": "Half of 8?", "sol": 4}\n',
    )
    probs = read_seeds(p, input_key="q", label_key="a", output_key="sol")
    assert [x.solution for x in probs] == ["2+3=5, so \\boxed{5}", "6*7 = 42\n\\boxed{42}", "4"]
    assert [x.label for x in probs] == ["5", "42", None]  # a GSM8K-style label is cut to 42
    assert probs[1].meta == {"src": "gsm8k"}  # the answer does not go into meta
    # without output_key nothing changes: no solution, and the extra key stays in meta
    plain = read_seeds(p, input_key="q", label_key="a")
    assert plain[0].solution is None and plain[0].meta == {"sol": "2+3=5, so \\boxed{5}"}


@pytest.mark.parametrize(
    "second_row,needle",
    [
        ('{"problem": "b"}', ":2: missing key 'solution' (keys present: problem); set --output_key"),
        ('{"problem": "b", "solution": ""}', ":2: key 'solution' is empty"),
        ('{"problem": "b", "solution": "  \\n "}', ":2: key 'solution' is empty"),
        ('{"problem": "b", "solution": null}', ":2: key 'solution' is empty"),
        ('{"problem": "b", "solution": ["x"]}', ":2: key 'solution' is empty"),
        ('{"problem": "b", "solution": "work\\n#### "}', ":2: key 'solution' ends in '####' with no answer"),
    ],
)
def test_bad_answers_name_file_line_key(tmp_path, second_row, needle):
    p = write(tmp_path, '{"problem": "a", "solution": "fine"}\n' + second_row + "\n")
    with pytest.raises(DataError) as e:
        read_seeds(p, output_key="solution")
    assert str(p) in str(e.value) and needle in str(e.value)


def test_parquet_answers_name_row(tmp_path):
    pa = pytest.importorskip("pyarrow", reason="pyarrow not installed")
    import pyarrow.parquet as pq

    p = tmp_path / "s.parquet"
    pq.write_table(pa.table({"problem": ["a", "b"], "solution": ["#### 1", ""]}), p)
    with pytest.raises(DataError, match=r"s\.parquet: row 1: key 'solution' is empty"):
        read_seeds(p, output_key="solution")
    pq.write_table(pa.table({"problem": ["a"], "solution": ["#### 1"]}), p)
    assert read_seeds(p, output_key="solution")[0].solution == "\\boxed{1}"


def test_a_single_file_has_only_the_train_split(tmp_path):
    p = write(tmp_path, '{"problem": "a"}\n')
    assert len(read_seeds(p, split="train")) == 1
    with pytest.raises(DataError, match="a single file has one split, 'train', not 'test'"):
        read_seeds(p, split="test")


@pytest.mark.parametrize(
    "rel,input_key,output_key,n",
    [
        ("serl_seed/0_2_0_8_train_with_idx_sample_500.jsonl", "problem", "solution", 500),
        ("gsm8k/test.jsonl", "question", "answer", 1319),
    ],
)
def test_shared_data_solutions(rel, input_key, output_key, n):
    p = SHARED / rel
    if not p.exists():
        pytest.skip(f"shared data not beside the checkout ({p} absent)")
    probs = read_seeds(p, input_key=input_key, label_key="answer", output_key=output_key)
    assert len(probs) == n and all(x.solution for x in probs)
    # every solution ends in a boxed answer: MATH solutions already have one, GSM8K's
    # "#### n" becomes one, and the GSM8K label is that same n
    assert all("\\boxed{" in x.solution for x in probs)
    if rel.startswith("gsm8k"):
        assert all(x.solution.endswith(f"\\boxed{{{x.label}}}") for x in probs)
        assert not any("<<" in x.solution or "####" in x.solution for x in probs)
