"""serl.models.resolve: publishing a converted model when several processes convert at once."""

import pytest

from serl.models.resolve import _publish


def _finished(d):
    d.mkdir()
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_text("weights")
    return d


def test_publish_moves_the_conversion_into_place(tmp_path):
    tmp, out = _finished(tmp_path / ".tmp-a"), tmp_path / "model"
    _publish(tmp, out)
    assert (out / "config.json").is_file() and not tmp.exists()


def test_a_conversion_finished_by_another_process_is_kept(tmp_path):
    out = _finished(tmp_path / "model")
    (out / "model.safetensors").write_text("theirs")
    _publish(_finished(tmp_path / ".tmp-b"), out)
    assert (out / "model.safetensors").read_text() == "theirs"


def test_a_half_written_target_is_an_error(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "stray").write_text("not a model")  # no config.json: nobody finished there
    with pytest.raises(OSError):
        _publish(_finished(tmp_path / ".tmp-c"), out)


def _cut_copy(src, dst, keep: int):
    """A copy of model directory ``src`` whose model.safetensors keeps its first ``keep`` bytes."""
    import shutil

    dst.mkdir()
    for f in src.iterdir():
        if f.name != "model.safetensors":
            shutil.copy(f, dst / f.name)
    with open(src / "model.safetensors", "rb") as a, open(dst / "model.safetensors", "wb") as b:
        b.write(a.read(keep))
    return dst


@pytest.mark.parametrize(
    "keep,needle",
    [
        (1 << 20, "1,048,576 bytes, but its tensors end at byte 269,060,552: cut short"),
        (100, "its header length says"),
        (5, "5 bytes, shorter than its 8-byte header length"),
    ],
)
def test_a_truncated_safetensors_file_is_refused_by_name(tmp_path, smol_path, keep, needle):
    from pathlib import Path

    from serl import ModelError
    from serl.models.resolve import resolve_model

    d = _cut_copy(Path(smol_path), tmp_path / "cut", keep)
    with pytest.raises(ModelError) as e:
        resolve_model(str(d))
    msg = str(e.value)
    assert msg.startswith(f"{d / 'model.safetensors'}: not a complete safetensors file (") and needle in msg
    assert "copy or download the model again" in msg
    assert resolve_model(smol_path) == smol_path  # the whole file passes
