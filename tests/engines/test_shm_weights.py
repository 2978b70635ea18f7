"""SafetensorsMirror: the in-place file is a valid safetensors file with the cast values."""

import pytest
import torch
from safetensors.torch import load_file

from serl.engines.shm_weights import SafetensorsMirror


def _weights(seed):
    g = torch.Generator().manual_seed(seed)
    return {
        "a.weight": torch.randn(3, 5, generator=g),
        "b.bias": torch.randn(7, generator=g),
        "c": torch.randn(2, 2, 2, generator=g),
    }


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


class _Once:
    """An iterable that can be read once and records how many tensors it has handed out."""

    def __init__(self, items):
        self.items, self.given = list(items), 0

    def __iter__(self):
        for item in self.items:
            self.given += 1
            yield item


def test_streams_into_the_layout_and_relays_midway(tmp_path):
    path = str(tmp_path / "model.safetensors")
    m = SafetensorsMirror(path)
    m.write(_weights(0).items())
    w1 = list(_weights(1).items())
    seen = []

    def stream():  # each tensor is in the file before the next one is asked for
        for i, (k, v) in enumerate(w1):
            if i:
                seen.append(torch.equal(load_file(path)[w1[i - 1][0]], w1[i - 1][1].bfloat16()))
            yield k, v

    m.write(stream())
    assert seen == [True, True]
    # a new name after two matching tensors: the first two are kept, the file laid out anew
    w2 = _weights(2)
    src = _Once([("a.weight", w2["a.weight"]), ("b.bias", w2["b.bias"]), ("d", torch.ones(4)), ("c", w2["c"])])
    m.write(src)
    got = load_file(path)
    assert list(got) == ["a.weight", "b.bias", "d", "c"] and src.given == 4
    assert torch.equal(got["a.weight"], w2["a.weight"].bfloat16()) and torch.equal(
        got["b.bias"], w2["b.bias"].bfloat16()
    )
    assert torch.equal(got["d"], torch.ones(4, dtype=torch.bfloat16)) and torch.equal(got["c"], w2["c"].bfloat16())
    m.write([("a.weight", w2["a.weight"])])  # fewer tensors: the file holds only those
    assert list(load_file(path)) == ["a.weight"]
