"""No foreign line around a run: DeepSpeed's accelerator probe on a machine without one, and the
resource tracker's "leaked shared_memory" lines after a stop killed a worker (serl.cli)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_a_killed_worker_s_shared_memory_leaves_no_line():
    r = _run(
        "from serl.cli import quiet_resource_tracker\n"
        "quiet_resource_tracker()\n"
        "from multiprocessing import shared_memory\n"
        "m = shared_memory.SharedMemory(create=True, size=1024)\n"
        "import os; os._exit(0)  # as a stop that never closed it\n"
    )
    assert r.returncode == 0 and "leaked" not in r.stderr and "resource_tracker" not in r.stderr, r.stderr


def test_deepspeed_does_not_announce_the_cpu():
    from serl.cli import ACCELERATOR_DEVICES

    if any(os.path.exists(d) for d in ACCELERATOR_DEVICES):
        pytest.skip("this machine has an accelerator: DeepSpeed picks it")
    pytest.importorskip("deepspeed")
    r = _run(
        "from serl.cli import quiet_deepspeed_probe\n"
        "quiet_deepspeed_probe()\n"
        "from deepspeed.accelerator import get_accelerator\n"
        "print(get_accelerator().device_name())\n"
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("cpu"), r.stderr[-2000:]
    assert "Setting accelerator" not in r.stdout + r.stderr
