import json

import pytest

from serl.eval.data import DataError, load_math_benchmark, load_mmlu_pro


@pytest.mark.parametrize(
    "name,idx,gold,choice,level,subject",
    [
        ("math_500", 0, r"\left( 3, \frac{\pi}{2} \right)", False, "2", "Precalculus"),
        ("gsm8k", 0, "18", False, None, None),
        ("svamp", 0, "145.0", False, None, "Common-Division"),
        ("aqua", 0, "A", True, None, None),
        ("sat_math", 0, "A", True, None, None),
        ("math_hard", 0, "4.5", False, "Level 5", "Algebra"),  # answer = full solution, last box
    ],
)
def test_real_benchmark_rows(math_dir, name, idx, gold, choice, level, subject):
    problems = load_math_benchmark(math_dir, name, limit=3)
    assert len(problems) == 3
    p = problems[idx]
    assert (p.gold, p.choice, p.level, p.subject) == (gold, choice, level, subject)
    assert p.question and p.benchmark == name and p.idx == idx


def test_gsm8k_hash_answers_accepted(tmp_path, gsm8k_raw):
    src = gsm8k_raw.read_text().splitlines()[:2]
    (tmp_path / "gsm8k_raw").mkdir()
    (tmp_path / "gsm8k_raw" / "test.jsonl").write_text("\n".join(src) + "\n")
    problems = load_math_benchmark(tmp_path, "gsm8k_raw")
    assert [p.gold for p in problems] == ["18", "3"]


def _bench(tmp_path, lines):
    (tmp_path / "b").mkdir(exist_ok=True)
    (tmp_path / "b" / "test.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path


@pytest.mark.parametrize(
    "lines,message",
    [
        (['{"question": "1+1?", "answer": "\\\\boxed{2}"}', '{"question": "x", '], "test.jsonl:2: not valid JSON"),
        (['{"question": "1+1?"}'], "test.jsonl:1: missing field 'answer'"),
        (['{"answer": "2"}'], "test.jsonl:1: missing field 'question' or 'problem'"),
        (["[1, 2]"], "test.jsonl:1: expected a JSON object"),
        (["", ""], "no rows"),
    ],
)
def test_bad_rows_name_file_line_field(tmp_path, lines, message):
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load_math_benchmark(_bench(tmp_path, lines), "b")


def test_missing_dir_and_file(tmp_path):
    with pytest.raises(DataError, match="benchmark directory not found"):
        load_math_benchmark(tmp_path, "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"empty/test.jsonl: file not found"):
        load_math_benchmark(tmp_path, "empty")


def test_mmlu_pro_validation_real(mmlu_dir):
    val = load_mmlu_pro(mmlu_dir / "validation.jsonl")
    assert len(val) == 70
    assert len({q.category for q in val}) == 14
    assert all(q.cot_content.startswith("A: Let's think step by step.") for q in val)


@pytest.mark.parametrize(
    "change,message",
    [
        ({"options": "A B"}, "field 'options'"),
        ({"answer": "Z"}, "field 'answer' must be a letter"),
        ({"answer": "D", "options": ["x", "y"]}, "field .answer. .D. is past the last option"),
        ({"category": ""}, "missing field 'category'"),
    ],
)
def test_mmlu_bad_fields(tmp_path, change, message):
    row = {
        "question_id": 1,
        "question": "q",
        "options": ["a", "b", "c"],
        "answer": "B",
        "answer_index": 1,
        "category": "math",
        "cot_content": "",
    }
    path = tmp_path / "test.jsonl"
    path.write_text(json.dumps(row) + "\n" + json.dumps(row | change) + "\n")
    with pytest.raises(DataError, match=f"test.jsonl:2: {message}"):
        load_mmlu_pro(path)
