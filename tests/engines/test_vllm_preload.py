"""tcmalloc preloaded into vLLM-CPU's engine processes only (serl.engines.vllm_generator)."""

import os

import pytest

from serl.engines import vllm_generator as vg


@pytest.fixture
def lib(tmp_path, monkeypatch):
    path = tmp_path / "libtcmalloc_minimal.so.4"
    path.write_bytes(b"")
    monkeypatch.setattr(vg, "TCMALLOC", (str(tmp_path / "missing.so"), str(path)))
    monkeypatch.delenv("SERL_TCMALLOC", raising=False)
    return str(path)


@pytest.mark.parametrize("before", [None, "/opt/other.so"])
def test_preloaded_while_the_engine_starts_then_put_back(lib, monkeypatch, before):
    if before is None:
        monkeypatch.delenv("LD_PRELOAD", raising=False)
    else:
        monkeypatch.setenv("LD_PRELOAD", before)
    with vg._engine_preload(on_cpu=True):
        assert os.environ["LD_PRELOAD"] == (lib if before is None else f"{lib}:{before}")
        os.environ["LD_PRELOAD"] += ":/vllm/adds/libgomp.so"  # as vLLM's CPU platform does
    assert os.environ.get("LD_PRELOAD") == before


@pytest.mark.parametrize(
    "on_cpu, env, preset", [(False, None, None), (True, "0", None), (True, None, "/x/libtcmalloc.so")]
)
def test_not_preloaded_on_gpu_when_turned_off_or_already_there(lib, monkeypatch, on_cpu, env, preset):
    if env is not None:
        monkeypatch.setenv("SERL_TCMALLOC", env)
    if preset is None:
        monkeypatch.delenv("LD_PRELOAD", raising=False)
    else:
        monkeypatch.setenv("LD_PRELOAD", preset)
    with vg._engine_preload(on_cpu=on_cpu):
        assert os.environ.get("LD_PRELOAD") == preset


def test_no_library_no_preload(monkeypatch, tmp_path):
    monkeypatch.setattr(vg, "TCMALLOC", (str(tmp_path / "missing.so"),))
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    with vg._engine_preload(on_cpu=True):
        assert "LD_PRELOAD" not in os.environ


def test_the_environment_is_put_back_when_the_engine_fails(lib, monkeypatch):
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    with pytest.raises(RuntimeError, match="engine failed"):
        with vg._engine_preload(on_cpu=True):
            raise RuntimeError("engine failed")
    assert "LD_PRELOAD" not in os.environ
