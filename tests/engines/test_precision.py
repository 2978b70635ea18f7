"""serl.engines.precision: bf16 where the hardware computes it natively, fp32 elsewhere, on faked CPUs."""

import json
import logging

import pytest

from serl.engines import precision as P

# /proc/cpuinfo flags of the machine kinds serl meets (trimmed to what decides bf16)
KINDS = {
    "intel_amx": ({"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}, True, "AMX"),
    "amd_zen4": ({"avx2", "avx512f", "avx512_bf16"}, True, "AVX-512-BF16"),
    "intel_skylake": ({"avx2", "avx512f"}, False, "AVX-512 without BF16"),
    "amd_avx2": ({"avx2", "fma"}, False, "AVX2 only"),
    "old_x86": ({"sse4_2"}, False, "DEFAULT"),
}


def _hw(kind: str) -> P.Hardware:
    return P.cpu_hardware(name=f"fake {kind}", flags=KINDS[kind][0], capability="DEFAULT")


@pytest.fixture(autouse=True)
def _fresh_warnings():
    P._warned.clear()
    yield
    P._warned.clear()


@pytest.mark.parametrize("kind", list(KINDS))
def test_native_bf16_is_read_off_the_isa_flags(kind):
    hw = _hw(kind)
    assert hw.bf16_native is KINDS[kind][1]
    assert KINDS[kind][2] in hw.why
    assert hw.summary().startswith(f"fake {kind} (")


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize(
    "setting,native,emulated", [("auto", True, False), ("true", True, True), ("false", False, False)]
)
def test_learner_choice_on_each_kind(kind, setting, native, emulated, caplog):
    hw = _hw(kind)
    with caplog.at_level(logging.WARNING, logger="serl"):
        got = P.learner_bf16(setting, hw)
    # auto follows the hardware; true and false are obeyed
    assert got == (hw.bf16_native if setting == "auto" else setting == "true")
    warned = [r for r in caplog.records if "emulated" in r.getMessage()]
    assert len(warned) == (1 if setting == "true" and not hw.bf16_native else 0)
    if warned:
        assert "50x slower" in warned[0].getMessage() and "fake" in warned[0].getMessage()


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("setting", ["auto", "bfloat16", "float16", "float32"])
def test_generator_choice_on_each_kind(kind, setting, caplog):
    hw = _hw(kind)
    with caplog.at_level(logging.WARNING, logger="serl"):
        got = P.generator_dtype(setting, hw)
    want = ("bfloat16" if hw.bf16_native else "float32") if setting == "auto" else setting
    assert got == want
    assert bool(caplog.records) == (setting == "bfloat16" and not hw.bf16_native)


def test_the_emulation_warning_comes_once(caplog):
    hw = _hw("amd_avx2")
    with caplog.at_level(logging.WARNING, logger="serl"):
        for _ in range(3):
            P.learner_bf16("true", hw)
            P.generator_dtype("bfloat16", hw)
    assert len(caplog.records) == 2  # one for the learner, one for the generator


@pytest.mark.parametrize(
    "value,want",
    [
        (True, "true"),
        (False, "false"),
        ("auto", "auto"),
        ("YES", "true"),
        ("0", "false"),
        ("off", "false"),
        ("", "auto"),
    ],
)
def test_bf16_setting_reads_yaml_booleans_and_words(value, want):
    assert P.bf16_setting(value) == want


@pytest.mark.parametrize("value", ["maybe", "bf16", 2])
def test_bf16_setting_refuses_other_values(value):
    with pytest.raises(ValueError, match="expected auto, true or false"):
        P.bf16_setting(value)


def test_generator_dtype_refuses_unknown_names():
    with pytest.raises(ValueError, match="generator dtype"):
        P.generator_dtype("int8", _hw("amd_zen4"))


@pytest.mark.parametrize(
    "kind,line",
    [
        ("amd_avx2", "learner fp32 (--bf16 auto), generator float32 (--generator_dtype auto)"),
        ("intel_amx", "learner bf16 (--bf16 auto), generator bfloat16 (--generator_dtype auto)"),
    ],
)
def test_the_start_line_names_the_machine_and_the_choice(monkeypatch, kind, line):
    monkeypatch.setattr(P, "hardware", lambda device="cpu": _hw(kind))
    p = P.choose("auto", "auto", "cpu")
    assert p.line().startswith(f"precision: fake {kind} (") and p.line().endswith(line)


def test_the_record_notes_a_resume_that_chooses_differently(tmp_path, monkeypatch):
    monkeypatch.setattr(P, "hardware", lambda device="cpu": _hw("amd_zen4"))
    first = P.choose("auto", "auto", "cpu")
    assert P.record(tmp_path, first, 0) is None
    assert P.record(tmp_path, first, 3) is None  # the same choice on resume: nothing to say
    monkeypatch.setattr(P, "hardware", lambda device="cpu": _hw("amd_avx2"))
    note = P.record(tmp_path, P.choose("auto", "auto", "cpu"), 5)
    assert note and "it was learner bf16, generator bfloat16 on fake amd_zen4" in note
    assert "now learner fp32, generator float32 on fake amd_avx2" in note
    segs = json.loads((tmp_path / P.RECORD).read_text())["segments"]
    assert [(s["step"], s["learner"]) for s in segs] == [(0, "bf16"), (3, "bf16"), (5, "fp32")]


def test_the_real_machine_is_described():
    hw = P.cpu_hardware()
    assert hw.device == "cpu" and hw.name and hw.capability
    assert hw.bf16_native == any(f in hw.isa for f in ("amx_bf16", "avx512_bf16", "bf16"))


@pytest.mark.parametrize(
    "sm,learner,generator",
    [((9, 0), True, "bfloat16"), ((8, 0), True, "bfloat16"), ((7, 5), False, "float16"), ((7, 0), False, "float16")],
)
def test_gpus_by_compute_capability(monkeypatch, sm, learner, generator):
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: sm)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "fake GPU")
    hw = P.gpu_hardware()
    assert hw.device == "cuda" and hw.bf16_native is learner and f"sm_{sm[0]}{sm[1]}" in hw.why
    assert P.learner_bf16("auto", hw) is learner and P.generator_dtype("auto", hw) == generator
