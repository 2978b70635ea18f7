"""Hugging Face dataset sources for --prompt_data, offline: each dataset is built here."""

import json
import time

import pytest

datasets = pytest.importorskip("datasets", reason="the 'datasets' dependency is not installed")

from serl import DataError  # noqa: E402
from serl.data import hf  # noqa: E402
from serl.data.seeds import read_seeds  # noqa: E402

TRAIN = {
    "question": ["What is 2+3?", "What is 6*7?", "What is 9-4?"],
    "answer": ["2+3 = <<2+3=5>>5\n#### 5", "6*7 = 42\n#### 42", "9-4 = 5\n#### 5"],
}
TEST = {"question": ["What is 1+1?"], "answer": ["#### 2"]}


@pytest.fixture(autouse=True)
def _isolated_cache(monkeypatch, tmp_path):
    # load_dataset writes Arrow caches; keep them out of the user's ~/.cache
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))


def _dict():
    return datasets.DatasetDict({"train": datasets.Dataset.from_dict(TRAIN), "test": datasets.Dataset.from_dict(TEST)})


def _read(src, **kw):
    return read_seeds(src, input_key="question", label_key="answer", **kw)


def test_save_to_disk_dataset_dict_and_splits(tmp_path):
    _dict().save_to_disk(tmp_path / "dd")
    probs = _read(tmp_path / "dd", output_key="answer")
    assert [p.text for p in probs] == TRAIN["question"]
    assert [p.label for p in probs] == ["5", "42", "5"]
    assert probs[0].solution == "2+3 = 5\n\\boxed{5}"
    assert [p.label for p in _read(tmp_path / "dd", split="test")] == ["2"]
    with pytest.raises(DataError, match=r"dd: no split 'validation' \(splits: train, test\)"):
        _read(tmp_path / "dd", split="validation")


def test_save_to_disk_single_dataset(tmp_path):
    datasets.Dataset.from_dict(TRAIN).save_to_disk(tmp_path / "one")
    assert len(_read(tmp_path / "one")) == 3
    with pytest.raises(DataError, match="a single dataset .* not a dataset with a split 'test'"):
        _read(tmp_path / "one", split="test")


@pytest.mark.parametrize("kind", ["csv", "arrow", "json_array", "parquet_folder", "jsonl_folder"])
def test_datasets_readable_files_and_folders(tmp_path, kind):
    ds = datasets.Dataset.from_dict(TRAIN)
    if kind == "csv":
        src = tmp_path / "train.csv"
        ds.to_csv(src)
    elif kind == "arrow":  # the Arrow file inside a save_to_disk folder, read on its own
        ds.save_to_disk(tmp_path / "saved")
        src = next((tmp_path / "saved").glob("*.arrow"))
    elif kind == "json_array":
        src = tmp_path / "train.json"
        src.write_text(json.dumps([dict(zip(TRAIN, v)) for v in zip(*TRAIN.values())], indent=1))
    elif kind == "parquet_folder":
        src = tmp_path / "pq"
        src.mkdir()
        ds.select([0, 1]).to_parquet(src / "part-0.parquet")
        ds.select([2]).to_parquet(src / "part-1.parquet")
    else:
        src = tmp_path / "jl"
        src.mkdir()
        ds.to_json(src / "data.jsonl")
    probs = _read(src, output_key="answer")
    assert sorted(p.text for p in probs) == sorted(TRAIN["question"])
    assert sorted(p.label for p in probs) == ["42", "5", "5"]


def test_max_samples(tmp_path):
    _dict().save_to_disk(tmp_path / "dd")
    assert [p.text for p in _read(tmp_path / "dd", limit=2)] == TRAIN["question"][:2]
    assert len(hf.read_hf_rows(tmp_path / "dd", max_samples=10)) == 3


def test_missing_column_names_source_and_columns(tmp_path):
    _dict().save_to_disk(tmp_path / "dd")
    with pytest.raises(DataError) as e:
        read_seeds(tmp_path / "dd", input_key="problem")
    assert str(tmp_path / "dd") in str(e.value)
    assert "(split 'train'): missing column 'problem' (columns present: question, answer)" in str(e.value)
    with pytest.raises(DataError, match="missing column 'solution'"):
        _read(tmp_path / "dd", output_key="solution")


def test_empty_answer_names_source_split_and_row(tmp_path):
    bad = dict(TRAIN, answer=["#### 5", "", "#### 5"])
    datasets.Dataset.from_dict(bad).save_to_disk(tmp_path / "bad")
    with pytest.raises(DataError, match=r"bad \(split 'train'\): row 1: key 'answer' is empty"):
        _read(tmp_path / "bad", output_key="answer")


def test_empty_split(tmp_path):
    # a split filtered down to no rows still saves one (empty) shard
    empty = datasets.Dataset.from_dict(TRAIN).filter(lambda row: False)
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(TRAIN), "test": empty}).save_to_disk(tmp_path / "dd")
    with pytest.raises(DataError, match=r"dd: split 'test' is empty"):
        _read(tmp_path / "dd", split="test")
    p = tmp_path / "empty.csv"
    p.write_text("question,answer\n")  # a header and no rows
    with pytest.raises(DataError, match=r"empty\.csv: split 'train' is empty \(no rows\)"):
        _read(p)


@pytest.mark.parametrize(
    "name,content",
    [
        ("broken.arrow", b"this is not an arrow file"),
        ("broken.parquet", b"PAR1 not really"),
        ("notes.txt", b"hello"),
    ],
)
def test_unreadable_files(tmp_path, name, content):
    p = tmp_path / name
    p.write_bytes(content)
    with pytest.raises(DataError) as e:
        read_seeds(p)
    assert str(p) in str(e.value)


def test_corrupt_save_to_disk_folder(tmp_path):
    _dict().save_to_disk(tmp_path / "dd")
    (tmp_path / "dd" / "dataset_dict.json").write_text("{not json")
    with pytest.raises(DataError, match="not readable as a Hugging Face dataset"):
        _read(tmp_path / "dd")


@pytest.mark.parametrize("src", ["data/missing.csv", "no/such/dir/x.jsonl"])
def test_missing_local_paths(tmp_path, src):
    with pytest.raises(DataError, match="seed file not found"):
        read_seeds(tmp_path / src)


@pytest.mark.parametrize(
    "src,ok",
    [
        ("openai/gsm8k", True),
        ("gsm8k", True),
        ("openai/gsm8k:main", True),
        ("data.csv", False),
        ("a/b/c", False),
        ("./x", False),
        ("owner/seeds.jsonl", False),
    ],
)
def test_hub_id_shape(src, ok):
    assert hf.looks_like_hub_id(src) is ok


def test_unreachable_hub_names_the_id(monkeypatch):
    def no_network(repo_id):
        raise ConnectionError("[Errno -2] Name or service not known")

    monkeypatch.setattr(hf, "_hub_probe", no_network)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    with pytest.raises(DataError) as e:
        read_seeds("openai/gsm8k:main")
    msg = str(e.value)
    assert msg.startswith("openai/gsm8k:main: no local file or folder of that name")
    assert "could not be reached to fetch dataset 'openai/gsm8k'" in msg


def test_unknown_hub_id_fails_fast_with_the_id():
    # the real probe: here (no network) it cannot connect; where the hub is reachable the
    # id does not exist. Either way a DataError naming the id, within the probe's timeout.
    t = time.monotonic()
    with pytest.raises(DataError, match="dataset 'serl-tests/no-such-dataset-7f3a'"):
        read_seeds("serl-tests/no-such-dataset-7f3a")
    assert time.monotonic() - t < hf.HUB_TIMEOUT_S + 10


def test_offline_mode_uses_only_the_cache(monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # both libraries read the variable at import; set what they read now
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hf, "_hub_probe", lambda repo_id: pytest.fail("probed while offline"))
    with pytest.raises(DataError, match="only the local datasets cache is searched for dataset 'openai/gsm8k'"):
        read_seeds("openai/gsm8k:main")
