"""The same rows as a JSONL file and as a `save_to_disk` folder give the same seeds."""

import json
from pathlib import Path

import pytest

datasets = pytest.importorskip("datasets", reason="the 'datasets' dependency is not installed")

from serl.data.seeds import read_seeds  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT / "dataset" / "arith_seed.jsonl"


@pytest.fixture(autouse=True)
def _isolated_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))


def _rows():
    return [json.loads(line) for line in SEEDS.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("as_dict", [True, False], ids=["DatasetDict", "Dataset"])
@pytest.mark.parametrize("limit", [None, 7])
def test_save_to_disk_folder_reads_as_the_jsonl_does(tmp_path, as_dict, limit):
    ds = datasets.Dataset.from_list(_rows())
    (datasets.DatasetDict({"train": ds}) if as_dict else ds).save_to_disk(tmp_path / "seeds")
    kw = dict(input_key="problem", label_key="answer", limit=limit, output_key="solution")
    from_jsonl = read_seeds(SEEDS, **kw)
    from_folder = read_seeds(tmp_path / "seeds", **kw)
    assert len(from_jsonl) == (limit or 200)
    assert from_folder == from_jsonl  # text, label, solution and metadata, in order


def test_columns_missing_from_some_rows_stay_out_of_the_metadata(tmp_path):
    rows = [{"problem": "What is 1+1?", "answer": "2", "source": "a"}, {"problem": "What is 2+2?", "answer": "4"}]
    f = tmp_path / "s.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    datasets.Dataset.from_list(rows).save_to_disk(tmp_path / "d")  # fills the hole with None
    assert read_seeds(tmp_path / "d") == read_seeds(f)
