"""`serl info`: what a bug report needs, as lines and as JSON, from the real machine."""

import json
import subprocess
import sys

from serl.engines import info, precision


def _serl(*args):
    return subprocess.run(
        [sys.executable, "-m", "serl.cli", "info", *args], capture_output=True, text=True, timeout=120
    )


def test_serl_info_prints_every_part_of_a_bug_report():
    r = _serl()
    assert r.returncode == 0, r.stderr
    heads = [line.split(":")[0].strip() for line in r.stdout.splitlines() if not line.startswith(" ")]
    assert heads == ["CPU", "memory", "GPUs", "precision", "versions", "tcmalloc", "models"]
    hw = precision.cpu_hardware()
    assert hw.name in r.stdout and hw.why in r.stdout and f"torch capability {hw.capability}" in r.stdout
    want = "bf16" if hw.bf16_native else "fp32"
    assert f"auto picks learner {want}, generator {'bfloat16' if hw.bf16_native else 'float32'}" in r.stdout
    for pkg in ("torch", "transformers", "serl"):
        assert f"{pkg} " in r.stdout


def test_serl_info_json_agrees_with_the_precision_module():
    r = _serl("--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    hw = precision.cpu_hardware()
    assert got["cpu"]["isa"] == list(hw.isa) and got["cpu"]["cores"] >= 1
    assert got["memory_gib"] > 0 and got["gpus"] == []  # CI runs on CPUs; tests/gpu has the GPU side
    assert got["precision_auto"]["learner"] == ("bf16" if hw.bf16_native else "fp32")
    assert set(info.PACKAGES) <= set(got["versions"]) and got["versions"]["torch"]
    assert {"library", "preloaded_here", "preloaded_into_vllm_engines"} <= set(got["tcmalloc"])


def test_cached_models_are_listed(tmp_path, monkeypatch):
    (tmp_path / "serl" / "models" / "m-1").mkdir(parents=True)
    (tmp_path / "serl" / "models" / "m-1" / "config.json").write_text("{}")
    (tmp_path / "serl" / "models" / "half-written").mkdir()  # no config.json: not a model
    (tmp_path / "hub" / "models--org--name").mkdir(parents=True)
    monkeypatch.setenv("SERL_CACHE", str(tmp_path / "serl"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert info._cached_models() == ["serl: m-1", "hub: org/name"]


def test_the_rendered_lines_name_a_faked_gpu():
    data = {
        "cpu": {
            "model": "X",
            "machine": "x86_64",
            "isa": ["avx2"],
            "torch_capability": "AVX2",
            "bf16": "AVX2 only",
            "cores": 2,
            "logical_cpus": 4,
        },
        "memory_gib": 8.0,
        "gpus": [{"name": "H100", "memory_gib": 79.6, "capability": "9.0"}],
        "precision_auto": {"device": "cuda", "learner": "bf16", "generator": "bfloat16", "why": "H100 (sm_90)"},
        "versions": {"torch": "2.13", "vllm": None},
        "tcmalloc": {"library": None},
        "models_cached": [],
    }
    text = info.render(data)
    assert "GPUs:       H100 (79.6 GiB, sm 9.0)" in text and "cores:    2 usable of 4" in text
    assert "auto picks learner bf16, generator bfloat16 on cuda" in text and "absent:   vllm" in text
    assert "tcmalloc:   not found" in text
