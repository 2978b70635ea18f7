"""Weight snapshots: bf16 files written atomically, read back from a file or a model directory, and the
switcher that loads a generator only when what it serves changes."""

import pytest
import torch

from serl.recipes.spiral.snapshots import CURRENT, WeightSwitcher, load_snapshot, save_snapshot


def test_save_and_load_in_bf16(tmp_path):
    path = save_snapshot([("a", torch.tensor([1.0, 2.5])), ("b", torch.ones(2, 2))], tmp_path / "s/step.safetensors")
    assert path.is_file() and not list(path.parent.glob(".*tmp"))
    w = load_snapshot(path)
    assert set(w) == {"a", "b"} and all(t.dtype == torch.bfloat16 for t in w.values())
    assert w["a"].tolist() == [1.0, 2.5]


def test_a_model_directory_is_read_whole(tmp_path):
    save_snapshot([("a", torch.zeros(1))], tmp_path / "model-1.safetensors")
    save_snapshot([("b", torch.ones(1))], tmp_path / "model-2.safetensors")
    assert set(load_snapshot(tmp_path)) == {"a", "b"}


@pytest.mark.parametrize("name", ["missing.safetensors", "empty_dir"])
def test_missing_weights_are_refused(tmp_path, name):
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(FileNotFoundError, match="no .safetensors weights"):
        load_snapshot(tmp_path / name)


def test_nothing_to_save_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no weights to save"):
        save_snapshot([], tmp_path / "s.safetensors")


class Served:
    def __init__(self):
        self.loads = []

    def load_weights(self, named):
        self.loads.append(float(dict(named)["w"][0]))


def test_switcher_loads_only_on_a_change_and_reads_each_file_once(tmp_path):
    a = str(save_snapshot([("w", torch.full((1,), 1.0))], tmp_path / "a.safetensors"))
    b = str(save_snapshot([("w", torch.full((1,), 2.0))], tmp_path / "b.safetensors"))
    gen = Served()
    switch = WeightSwitcher(gen, lambda: [("w", torch.zeros(1))])
    for key in (CURRENT, a, a, b, a, CURRENT, CURRENT):
        switch.use(key)
    assert gen.loads == [1.0, 2.0, 1.0, 0.0]  # CURRENT is served at the start: no load for it
    assert (switch.loads, switch.reads) == (4, 2)
    switch.clear()
    switch.use(a)
    assert switch.reads == 3  # the cache is per step
    switch.serving_current()  # a weight sync loaded the current weights
    switch.use(CURRENT)
    assert switch.loads == 5
