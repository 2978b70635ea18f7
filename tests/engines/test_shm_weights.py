"""SafetensorsMirror: the in-place file is a valid safetensors file with the cast values."""
import pytest
import torch
from safetensors.torch import load_file

from serl.engines.shm_weights import SafetensorsMirror


def _weights(seed):
    g = torch.Generator().manual_seed(seed)
    return {"a.weight": torch.randn(3, 5, generator=g), "b.bias": torch.randn(7, generator=g),
            "c": torch.randn(2, 2, 2, generator=g)}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_writes_read_back_and_update_in_place(tmp_path, dtype):
    path = str(tmp_path / "model.safetensors")
    m = SafetensorsMirror(path, dtype=dtype)
    for seed in (0, 1):  # the second write reuses the layout and overwrites the values
        w = _weights(seed)
        m.write(w.items())
        got = load_file(path)
        assert set(got) == set(w)
        for k, v in w.items():
            assert got[k].dtype == dtype and torch.equal(got[k], v.to(dtype)), k
    size = (tmp_path / "model.safetensors").stat().st_size
    m.write(_weights(2).items())
    assert (tmp_path / "model.safetensors").stat().st_size == size


def test_same_tensor_twice_and_a_new_layout(tmp_path):
    path = str(tmp_path / "model.safetensors")
    m = SafetensorsMirror(path)
    emb = torch.randn(4, 3)
    m.write([("embed", emb), ("head", emb)])  # a tied head written under both names
    got = load_file(path)
    assert torch.equal(got["embed"], got["head"]) and torch.equal(got["embed"], emb.bfloat16())
    m.write([("embed", torch.ones(5, 3))])  # other shapes: laid out again
    got = load_file(path)
    assert list(got) == ["embed"] and torch.equal(got["embed"], torch.ones(5, 3, dtype=torch.bfloat16))


def test_rejects_integer_dtype(tmp_path):
    with pytest.raises(ValueError, match="dtype"):
        SafetensorsMirror(str(tmp_path / "x.safetensors"), dtype=torch.int64)
