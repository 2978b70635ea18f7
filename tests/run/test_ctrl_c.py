"""Ctrl-C during `serl train`: no traceback, a checkpoint, and the line that says how to resume."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from serl.run.checkpoint import CKPT_DIR, DONE

ROOT = Path(__file__).resolve().parents[2]


def _start(run, tiny_train_args):
    args = [a for a in tiny_train_args]
    args[args.index("--steps") + 1] = "8"
    args[args.index("--save_steps") + 1] = "0"  # no checkpoint but the one Ctrl-C asks for
    return subprocess.Popen(
        [sys.executable, "-m", "serl.cli", "train", "--run_dir", str(run), *args, "--device", "cpu"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_step(proc, run, timeout=600):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        m = run / "metrics.jsonl"
        if m.is_file() and m.read_text().count("\n") >= 1:
            return
        time.sleep(0.2)
    raise AssertionError(f"no step logged; rc={proc.poll()}")


def _interrupt(run, args, times: int) -> tuple[int, str]:
    """Start a run, wait for its first step, send ``times`` SIGINTs 0.3 s apart; (exit code, stderr)."""
    proc = _start(run, args)
    try:
        _wait_for_step(proc, run)
        for k in range(times):
            if k:
                time.sleep(0.3)
            os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, err


def test_one_ctrl_c_finishes_the_step_saves_and_says_how_to_resume(tmp_path, tiny_train_args):
    run = tmp_path / "run"
    rc, err = _interrupt(run, tiny_train_args, times=1)
    assert rc == 130, err[-3000:]
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    steps = sorted(p.name for p in (run / CKPT_DIR).glob("step_*") if (p / DONE).exists())
    assert len(steps) == 1
    n = int(steps[0].split("_")[1])
    assert 1 <= n < 8
    assert (
        last == f"serl train: stopped by Ctrl-C after step {n} (checkpoint saved); resume with serl train "
        f"--resume {run}"
    )
    assert (run / "metrics.jsonl").read_text().count("\n") == n


def test_a_second_ctrl_c_stops_at_once_without_a_traceback(tmp_path, tiny_train_args):
    run = tmp_path / "run"
    rc, err = _interrupt(run, tiny_train_args, times=2)
    assert rc == 130, err[-3000:]
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("serl train: stopped by Ctrl-C") and last.endswith(f"resume with serl train --resume {run}")


def test_sigterm_is_a_first_ctrl_c(tmp_path, tiny_train_args):
    """What a scheduler, `docker stop` or Kubernetes sends: the same stop as Ctrl-C, named."""
    run = tmp_path / "run"
    proc = _start(run, tiny_train_args)
    try:
        _wait_for_step(proc, run)
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    steps = sorted(p.name for p in (run / CKPT_DIR).glob("step_*") if (p / DONE).exists())
    n = int(steps[-1].split("_")[1])
    assert err.strip().splitlines()[-1] == (
        f"serl train: stopped by SIGTERM after step {n} (checkpoint saved); resume with serl train --resume {run}"
    )
    assert not (run / "run.lock").exists()


def test_a_stop_while_the_step_collects_does_not_wait_for_it(tmp_path, tiny_train_args):
    """A step that would spend minutes refilling its instruction pool (no group passes the difficulty
    bounds, 50 refill rounds) is dropped at once, untrained; the line says where the run stands."""
    run = tmp_path / "run"
    args = list(tiny_train_args)
    for flag, value in {"--max_refill_rounds": "50", "--instruction_max_attempts": "50"}.items():
        args[args.index(flag) + 1] = value
    k = args.index("--reward_difficulty_bounds")
    args[k + 1 : k + 3] = ["0.6", "0.7"]  # two samples agree by 0.5 or 1: no group passes
    proc = _start(run, args)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None and not (run / "config.yaml").is_file():
            time.sleep(0.2)
        time.sleep(10)  # inside step 1's collect
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=600)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"serl train: stopped by Ctrl-C; no checkpoint yet; resume with serl train --resume {run}"
    )
    assert not (run / "metrics.jsonl").is_file() or not (run / "metrics.jsonl").read_text()
    assert took < 30, took
