"""Seed files that Python's JSON parser cannot take, labels that are no labels, and paths
that are no files: each a DataError naming file and line (or the path), never a traceback."""

import os

import pytest

from serl import DataError
from serl.data.seeds import read_seeds

GOOD = '{"problem": "What is 1 + 1?", "answer": "2"}\n'


@pytest.mark.parametrize(
    "line, needle",
    [
        ('{"problem": ' + "[" * 100000 + "]" * 100000 + "}", ":2: JSON nested too deeply"),
        ('{"problem": "x", "answer": 1' + "0" * 5000 + "}", ":2: JSON that cannot be read"),
        ('{"problem": "What is 0/0?", "answer": NaN}', ":2: key 'answer' is nan, not a label"),
        ('{"problem": "What is 1/0?", "answer": Infinity}', ":2: key 'answer' is inf, not a label"),
    ],
)
def test_unreadable_json_and_nan_labels_name_file_and_line(tmp_path, line, needle):
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text(GOOD + line + "\n")
    with pytest.raises(DataError) as e:
        read_seeds(seeds)
    assert f"{seeds}{needle}" in str(e.value), str(e.value)


def test_a_nan_label_from_parquet_is_refused(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "seeds.parquet"
    pq.write_table(pa.table({"problem": ["What is 1 + 1?", "What is 2 + 2?"], "answer": [2.0, float("nan")]}), path)
    with pytest.raises(DataError, match=r"row 1: key 'answer' is nan"):
        read_seeds(path)


def test_a_symlink_loop_is_named_as_one(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    os.symlink(b, a)
    os.symlink(a, b)
    with pytest.raises(DataError) as e:
        read_seeds(a)
    assert "symbolic link that loops" in str(e.value) and "not found" not in str(e.value)


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null"])
def test_a_device_is_not_a_seed_file(path):
    if not os.path.exists(path):
        pytest.skip(f"no {path}")
    with pytest.raises(DataError) as e:
        read_seeds(path)
    assert "not a regular file or folder" in str(e.value) and "not found" not in str(e.value)


def test_train_on_deeply_nested_seeds_exits_2_in_one_line(tmp_path, train_here, monkeypatch):
    monkeypatch.chdir(tmp_path)
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text(GOOD + '{"problem": ' + "[" * 100000 + "]" * 100000 + "}\n")
    rc, err = train_here("--run_dir", str(tmp_path / "run"), "--prompt_data", str(seeds), "--generator", "hf")
    assert rc == 2 and f"{seeds}:2: JSON nested too deeply" in err and "Traceback" not in err, err[-2000:]
    assert not (tmp_path / "run").exists()
