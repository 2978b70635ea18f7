"""The float type the learner and the generator compute in, chosen by what the machine computes natively.

bf16 halves the bytes every weight and activation moves, and where the hardware has bf16 dot products
(AMX or AVX-512-BF16 on x86, the BF16 extension on Arm, a GPU of compute capability 8.0 or newer) it also
runs the matmuls faster. Where it has not, oneDNN emulates it: on an AVX2-only AMD EPYC a bf16 matmul ran at
1.1 GFLOP/s against 61 GFLOP/s in fp32 (issue 59), and a SmolLM2 update took minutes instead of seconds.

``auto`` (the default of ``--bf16`` and ``--generator_dtype``) therefore means bf16 where it is native and
fp32 everywhere else. Asking for bf16 where it would be emulated still works, with one warning. Each engine
decides for the hardware it runs on (``serl.engines.factory``: a Ray actor on another node decides there);
``choose`` gives the run's start line and the record in ``RUN_DIR/precision.json``.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import platform
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger("serl")

SETTINGS = ("auto", "true", "false")  # --bf16
DTYPES = ("auto", "bfloat16", "float16", "float32")  # --generator_dtype
# the ISA flags of /proc/cpuinfo that decide bf16 speed (x86; Arm lists "bf16" among its Features)
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "bf16")
RECORD = "precision.json"
# What emulation costs, measured (issue 59): one thread, a [256, 576] @ [576, 1536] matmul, AVX2-only EPYC.
EMULATED = "about 50x slower matmuls than fp32 (1.1 against 61 GFLOP/s on an AVX2-only AMD EPYC)"
_warned: set[str] = set()


@dataclass(frozen=True)
class Hardware:
    """What one device computes natively."""

    device: str  # cpu | cuda
    name: str  # the CPU model or GPU name
    isa: tuple[str, ...]  # the ISA_FLAGS present (CPU), or ("sm_80",) (GPU)
    capability: str  # torch.backends.cpu.get_cpu_capability() on a CPU
    bf16_native: bool
    why: str  # e.g. "AMX", "AVX-512-BF16", "AVX2 only: bf16 is emulated"

    def summary(self) -> str:
        return f"{self.name} ({self.why})"


def _cpuinfo() -> tuple[str, set[str]]:
    """(model name, flags) from /proc/cpuinfo; ("", set()) where there is none."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return "", set()
    name, flags = "", set[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and not name:
            name = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
    return name, flags


def cpu_hardware(name: str | None = None, flags: set[str] | None = None, capability: str | None = None) -> Hardware:
    """The CPU's bf16 support: from its ISA flags (given, for tests, or read from /proc/cpuinfo)."""
    if name is None or flags is None:
        read_name, read_flags = _cpuinfo()
        name = read_name if name is None else name
        flags = read_flags if flags is None else flags
    if capability is None:
        import torch

        capability = str(torch.backends.cpu.get_cpu_capability())
    name = name or platform.processor() or platform.machine() or "unknown CPU"
    isa = tuple(f for f in ISA_FLAGS if f in flags)
    arm = platform.machine().lower() in ("aarch64", "arm64") or "asimd" in flags
    if "amx_bf16" in flags:
        native, why = True, "AMX: native bf16"
    elif "avx512_bf16" in flags:
        native, why = True, "AVX-512-BF16: native bf16"
    elif arm and "bf16" in flags:
        native, why = True, "Arm BF16: native bf16"
    elif "avx512f" in flags:
        native, why = False, "AVX-512 without BF16: bf16 is emulated"
    elif "avx2" in flags:
        native, why = False, "AVX2 only: bf16 is emulated"
    else:
        native, why = False, f"{capability}: bf16 is emulated"
    return Hardware("cpu", name, isa, capability, native, why)


def gpu_hardware(index: int = 0) -> Hardware:
    """The GPU's bf16 support: compute capability 8.0 (Ampere) or newer."""
    import torch

    major, minor = torch.cuda.get_device_capability(index)
    native = (major, minor) >= (8, 0)
    why = f"sm_{major}{minor}: " + ("native bf16" if native else "no native bf16 (needs sm_80+)")
    return Hardware("cuda", torch.cuda.get_device_name(index), (f"sm_{major}{minor}",), "cuda", native, why)


@functools.lru_cache(maxsize=4)
def hardware(device: str = "cpu") -> Hardware:
    """The hardware an engine on ``device`` (cpu or cuda, already resolved) computes on."""
    return gpu_hardware() if device == "cuda" else cpu_hardware()


def bf16_setting(value) -> str:
    """``--bf16``'s value as auto, true or false (YAML's booleans and yes/no/1/0 included)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    s = str(value).strip().lower()
    if s in ("auto", ""):
        return "auto"
    if s in ("1", "true", "yes", "on"):
        return "true"
    if s in ("0", "false", "no", "off"):
        return "false"
    raise ValueError(f"expected auto, true or false, got {value!r}")


def _warn_emulated(what: str, hw: Hardware) -> None:
    if what in _warned:
        return
    _warned.add(what)
    log.warning(
        "%s asked for on %s: this hardware has no native bf16, so it is emulated, %s; 'auto' would choose fp32 here",
        what,
        hw.summary(),
        EMULATED,
    )


def learner_bf16(setting, hw: Hardware) -> bool:
    """Whether the learner computes in bf16: ``auto`` where native; ``true`` anyway (warned once)."""
    s = bf16_setting(setting)
    if s == "auto":
        return hw.bf16_native
    if s == "true" and not hw.bf16_native:
        _warn_emulated("--bf16 true", hw)
    return s == "true"


def generator_dtype(setting: str, hw: Hardware) -> str:
    """The generator's dtype name: ``auto`` is bfloat16 where native; else float16 on a GPU (every CUDA GPU
    computes it, and vLLM's own ``auto`` picks it there), float32 on a CPU."""
    s = str(setting or "auto").strip().lower()
    if s not in DTYPES:
        raise ValueError(f"generator dtype: expected one of {', '.join(DTYPES)}, got {setting!r}")
    if s == "auto":
        return "bfloat16" if hw.bf16_native else "float16" if hw.device == "cuda" else "float32"
    if s == "bfloat16" and not hw.bf16_native:
        _warn_emulated("generator dtype bfloat16", hw)
    return s


@dataclass(frozen=True)
class Precision:
    """A run's choice on the hardware it starts on."""

    learner: str  # bf16 | fp32
    generator: str  # bfloat16 | float16 | float32
    asked_learner: str  # the --bf16 setting
    asked_generator: str  # the --generator_dtype setting
    machine: str  # Hardware.summary() of the learner's device
    device: str

    def line(self) -> str:
        return (
            f"precision: {self.machine}; learner {self.learner} (--bf16 {self.asked_learner}), "
            f"generator {self.generator} (--generator_dtype {self.asked_generator})"
        )


def choose(bf16="auto", dtype: str = "auto", device: str = "cpu", gen_device: str | None = None) -> Precision:
    """The learner's and the generator's precision on this machine (``device``: the learner's, resolved;
    ``gen_device``: the generator's, default the same)."""
    hw = hardware(device)
    ghw = hw if gen_device in (None, device) else hardware(gen_device)
    return Precision(
        "bf16" if learner_bf16(bf16, hw) else "fp32",
        generator_dtype(dtype, ghw),
        bf16_setting(bf16),
        str(dtype),
        hw.summary(),
        device,
    )


def record(run_dir: Path, p: Precision, step: int) -> str | None:
    """Add this start's choice to RUN_DIR/precision.json; on a resume whose choice differs from the
    run's last one, return a line saying how (None otherwise)."""
    path = Path(run_dir) / RECORD
    segments = []
    if path.is_file():
        try:
            segments = list(json.loads(path.read_text()).get("segments", []))
        except (OSError, ValueError, AttributeError):
            segments = []  # a damaged record is replaced; the choice itself is made anew anyway
    note = None
    if segments:
        last = segments[-1]
        if (last.get("learner"), last.get("generator")) != (p.learner, p.generator):
            note = (
                f"precision differs from the run's last start: it was learner {last.get('learner')}, "
                f"generator {last.get('generator')} on {last.get('machine')}; now learner {p.learner}, "
                f"generator {p.generator} on {p.machine} (--bf16 and --generator_dtype set it explicitly)"
            )
    segments.append({"step": step, **asdict(p)})
    tmp = path.with_name(f".{RECORD}.tmp")
    tmp.write_text(json.dumps({"segments": segments}, indent=1) + "\n")
    os.replace(tmp, path)
    return note
