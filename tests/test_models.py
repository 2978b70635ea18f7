"""serl.models: publishing a converted model when several processes convert at once."""
import pytest

from serl.models import _publish


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
