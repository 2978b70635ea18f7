"""Hugging Face datasets as --prompt_data / --eval_data in `serl train`: --eval_split, and
clear errors (exit 2, no run directory) for missing columns, empty splits, unreadable data."""

from pathlib import Path

import pytest

datasets = pytest.importorskip("datasets", reason="the 'datasets' dependency is not installed")

from serl import DataError  # noqa: E402
from serl.config.options import TrainConfig  # noqa: E402
from serl.eval.sets import eval_split, load_eval_sets  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TRAIN = {"problem": ["What is 2+3?", "What is 6*7?"], "answer": ["5", "42"]}
TEST = {"problem": ["What is 1+1?", "What is 2+2?", "What is 3+3?"], "answer": ["2", "4", "6"]}


@pytest.fixture(autouse=True)
def _isolated_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))


@pytest.fixture
def dd(tmp_path):
    path = tmp_path / "dd"
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict(TRAIN), "test": datasets.Dataset.from_dict(TEST)}
    ).save_to_disk(path)
    return path


def test_eval_split_default_and_explicit(tmp_path, dd):
    one = tmp_path / "one"
    datasets.Dataset.from_dict(TRAIN).save_to_disk(one)
    jsonl = ROOT / "dataset" / "arith_heldout.jsonl"
    assert [eval_split(TrainConfig(eval_data=str(p))) for p in (dd, one, jsonl, "org/name")] == [
        "test",
        "train",
        "train",
        "test",
    ]
    assert eval_split(TrainConfig(eval_data=str(dd), eval_split="train")) == "train"


@pytest.mark.parametrize(
    "split,samples,want", [("", 0, ["2", "4", "6"]), ("", 2, ["2", "4"]), ("train", 0, ["5", "42"])]
)
def test_eval_data_from_a_dataset_folder(dd, split, samples, want):
    probs = load_eval_sets(TrainConfig(eval_data=str(dd), eval_split=split, eval_samples=samples))
    assert [p.gold for p in probs] == want and {p.benchmark for p in probs} == {"heldout"}


def test_eval_split_error_names_the_eval_option(dd):
    with pytest.raises(
        DataError,
        match=r"no split 'validation' \(splits: train, test\); choose one "
        r"with --eval_split",
    ):
        load_eval_sets(TrainConfig(eval_data=str(dd), eval_split="validation"))


def _make(tmp_path, kind):
    path = tmp_path / kind
    if kind == "missing_column":
        datasets.Dataset.from_dict({"question": ["What is 1+1?"], "answer": ["2"]}).save_to_disk(path)
    elif kind == "empty_split":
        empty = datasets.Dataset.from_dict(TRAIN).filter(lambda row: False)  # keeps one empty shard
        datasets.DatasetDict({"train": empty, "test": empty}).save_to_disk(path)
    elif kind == "unreadable":
        path.mkdir()
        (path / "state.json").write_text("{not json")
        (path / "data-00000-of-00001.arrow").write_bytes(b"\x00garbage")
    return path


NEEDLES = {
    "missing_column": "missing column 'problem' (columns present: question, answer)",
    "empty_split": "is empty",
    "unreadable": "not readable as a Hugging Face dataset",
}


@pytest.mark.parametrize("option", ["--prompt_data", "--eval_data"])
@pytest.mark.parametrize("kind", list(NEEDLES))
def test_bad_dataset_exits_2_naming_it(tmp_path, train_here, monkeypatch, option, kind):
    # in this process (conftest's train_here): refused before a model loads, where a subprocess
    # each cost 3 to 7 s of interpreter start and imports; the cache is _isolated_cache's
    src = _make(tmp_path, kind)
    run_dir = tmp_path / "run"
    monkeypatch.chdir(tmp_path)
    rc, err = train_here(
        "--run_dir",
        str(run_dir),
        "--generator",
        "hf",
        "--prompt_data",
        str(ROOT / "dataset" / "arith_seed.jsonl"),
        option,
        str(src),
    )
    assert rc == 2, err[-2000:]
    assert NEEDLES[kind] in err and str(src) in err, err[-2000:]
    assert "Traceback" not in err
    assert not run_dir.exists()
