"""The deciding run across machines (experiments/serl_efficacy/decide.py): a new --out starts
from the kept items, and an arm whose checkpoints were lost starts again with its old points
set apart, never mixed into the new curve."""
import json
from pathlib import Path

import pytest


@pytest.fixture()
def decide(experiment):
    return experiment("decide")


def _kept(items: Path) -> None:
    (items / "eval").mkdir(parents=True)
    for tag in ("d_intel-amx", "c_069", "a_022"):
        (items / "eval" / f"{tag}.json").write_text(json.dumps({"tag": tag}))
    (items / "setup.json").write_text('{"settings": {}}')
    (items / "timings.json").write_text('{"train": {}, "eval": {}}')
    for arm, step in (("c", 69), ("a", 22)):
        (items / f"arm_{arm}").mkdir()
        (items / f"arm_{arm}" / "metrics.jsonl").write_text(json.dumps({"step": step, "time/budget_min": 1.0}) + "\n")


def test_a_new_out_restores_the_kept_items_once(tmp_path, decide):
    items, out = tmp_path / "items", tmp_path / "out"
    _kept(items)
    decide.restore(items, out)
    assert sorted(p.name for p in (out / "eval").iterdir()) == ["a_022.json", "c_069.json", "d_intel-amx.json"]
    assert (out / "arm_c" / "metrics.jsonl").read_text() == (items / "arm_c" / "metrics.jsonl").read_text()
    (out / "setup.json").write_text('{"settings": {"later": 1}}')
    decide.restore(items, out)  # an --out that has its own setup is never overwritten
    assert json.loads((out / "setup.json").read_text()) == {"settings": {"later": 1}}


def test_a_lost_arm_sets_its_points_apart_in_out_and_items(tmp_path, decide):
    items, out = tmp_path / "items", tmp_path / "out"
    _kept(items)
    decide.restore(items, out)
    decide.set_aside("a", out, items)
    for root in (out, items):
        names = sorted(p.name for p in (root / "eval").iterdir())
        assert names == ["a-lost1_022.json", "c_069.json", "d_intel-amx.json"]
        assert (root / "arm_a-lost1" / "metrics.jsonl").exists()
        assert not (root / "arm_a" / "metrics.jsonl").exists()
        assert (root / "arm_c" / "metrics.jsonl").exists()
    assert not (items / "arm_a").exists()
    (items / "eval" / "a_010.json").write_text("{}")  # a second loss gets the next number
    (items / "arm_a").mkdir()
    (items / "arm_a" / "metrics.jsonl").write_text("{}\n")
    decide.set_aside("a", out, items)
    assert (items / "eval" / "a-lost2_010.json").exists() and (items / "arm_a-lost2" / "metrics.jsonl").exists()
