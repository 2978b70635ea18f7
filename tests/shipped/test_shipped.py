"""serl.shipped.locate: a relative path means the current directory; a shipped name that is
not there means serl's own copy; nothing else changes. (The wheel itself: test_wheel.py.)"""

import pytest

from serl import ConfigError, DataError
from serl.config.files import read_yaml
from serl.data.seeds import read_seeds
from serl.recipes.serl.instruct.template import TemplateError, load_template
from serl.shipped import KINDS, locate, shipped_dir

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def test_shipped_dirs_are_the_checkouts_in_a_checkout():
    # the tests run from a checkout (editable or PYTHONPATH): no packaged copy shadows it
    assert [shipped_dir(k) for k in KINDS] == [ROOT / k for k in KINDS]
    with pytest.raises(ValueError, match="unknown shipped folder 'models'"):
        shipped_dir("models")


@pytest.mark.parametrize(
    "name",
    [
        "dataset/arith_seed.jsonl",
        "./dataset/docs_train.jsonl",
        "configs/quickstart.yaml",
        "prompts/self_instruct_fewshot.txt",
    ],
)
def test_shipped_name_outside_the_checkout_means_the_shipped_copy(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    assert locate(name) == ROOT / name.removeprefix("./")


def test_the_current_directory_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dataset").mkdir()
    (tmp_path / "dataset" / "arith_seed.jsonl").write_text('{"problem": "mine", "answer": "1"}\n')
    assert locate("dataset/arith_seed.jsonl").resolve() == tmp_path / "dataset" / "arith_seed.jsonl"
    assert [p.text for p in read_seeds("dataset/arith_seed.jsonl")] == ["mine"]


@pytest.mark.parametrize(
    "name",
    [
        "dataset/no_such.jsonl",
        "data/arith_seed.jsonl",
        "arith_seed.jsonl",
        "dataset/sub/arith_seed.jsonl",
        "openai/gsm8k:main",
    ],
)
def test_other_names_are_left_alone(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    assert str(locate(name)) == name


def test_absolute_paths_are_left_alone(tmp_path):
    missing = tmp_path / "dataset" / "arith_seed.jsonl"  # absolute and absent: never redirected
    assert locate(missing) == missing
    with pytest.raises(DataError, match=f"seed file not found: {missing}"):
        read_seeds(missing)


def test_readers_find_shipped_files_from_elsewhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert len(read_seeds("dataset/arith_seed.jsonl")) == 200
    assert read_yaml("configs/quickstart.yaml")[1]["prompt_data"] == "dataset/arith_seed.jsonl"
    assert "{examples}" in load_template("prompts/self_instruct_fewshot.txt")
    assert load_template("self_instruct_fewshot") == load_template("prompts/self_instruct_fewshot.txt")
    with pytest.raises(DataError, match="seed file not found: dataset/nope.jsonl"):
        read_seeds("dataset/nope.jsonl")
    with pytest.raises(ConfigError, match="config file not found: configs/nope.yaml"):
        read_yaml("configs/nope.yaml")
    with pytest.raises(TemplateError, match=r"template not found: nope \(looked in .*prompts\)"):
        load_template("nope")
