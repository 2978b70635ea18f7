"""A real `serl serve-reward` killed in the middle of a `--remote_rm_url` run: the run neither
hangs nor trains on rewards it did not get. It retries for a bounded time, then exits 1 with
one line that names the URL, says to restart the server and how to resume; the last checkpoint
is intact, and `--resume` against the restarted server ends as a run the server never left
(with --share_prompts, whose stop-and-resume CI checks here at no extra cost)."""

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(port: int) -> subprocess.Popen:
    """`serl serve-reward --port PORT` in a session of its own, up and listening."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "serl.cli", "serve-reward", "--port", str(port), "--workers", "1"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    line = proc.stdout.readline()  # "serl serve-reward: POST http://127.0.0.1:PORT/get_reward (...)"
    assert f"POST http://127.0.0.1:{port}/get_reward" in line, line + proc.stdout.read()[-2000:]
    return proc


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the server and its workers, as a crash or the OOM killer would
    except ProcessLookupError:
        pass
    proc.wait(timeout=60)


def _metrics(run_dir):
    return [
        {k: v for k, v in json.loads(line).items() if not k.startswith("time/") and k != "wall_time"}
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]


def test_a_reward_server_killed_mid_run_stops_it_in_one_line_and_resume_is_exact(
    tmp_path, tiny_train_args, serl_start, smol_path
):
    from serl.run.checkpoint import checkpoint_dir, complete_checkpoints

    port, port_a = _free_port(), _free_port()
    url = f"http://127.0.0.1:{port}/get_reward"
    # lighter than the shared tiny run (no self-instruction); two steps, a checkpoint after each. Shared
    # prompts on: CI's only check that a run stopped and resumed with them is exact (other modes have theirs)
    args = [
        *tiny_train_args,
        "--enable_self_evolution",
        "false",
        "--generate_max_len",
        "16",
        "--steps",
        "2",
        "--remote_rm_retries",
        "2",
        "--share_prompts",
        "true",
    ]
    a, b = tmp_path / "a", tmp_path / "b"
    # b's server is killed; a run that keeps its own server all along goes beside it (one thread each)
    server, server_a = _serve(port), _serve(port_a)
    try:
        run = serl_start("--run_dir", b, *args, "--remote_rm_url", url)
        ref = serl_start("--run_dir", a, *args, "--remote_rm_url", f"http://127.0.0.1:{port_a}/get_reward")
        done = checkpoint_dir(b, 1) / "COMPLETE"
        deadline = time.monotonic() + 900
        while not done.exists() and run.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert done.exists(), (b / "metrics.jsonl").exists()
        _kill(server)  # step 2 is generating: its reward request finds no server
        killed_at = time.monotonic()
        r = run.wait(timeout=600)
        took = time.monotonic() - killed_at
        res_a = ref.wait(timeout=900)
    finally:
        _kill(server)
        _kill(server_a)
    # exit 1 and one line, the last: the URL, that the server is down, restart it, how to resume
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    want = (
        f"serl train: error: remote reward {url}: no rewards after 3 tries over @ s (last: "
        f"ConnectionRefusedError: [Errno 111] Connection refused); the step was not trained. The server is "
        f"down or not answering: restart it (e.g. `serl serve-reward --port {port}`); the last checkpoint, "
        f"{checkpoint_dir(b, 1)} (step 1), is intact: then continue with `serl train --resume {b}`"
    )
    assert re.fullmatch(re.escape(want).replace("@", r"\d+\.\d"), lines[-1]), lines[-1]
    assert took < 300  # step 2's generation, then 0.5 + 1 s of back-off: bounded, no hang
    # nothing trained on rewards that never came: no step-2 metrics, no step-2 checkpoint
    assert [m["step"] for m in _metrics(b)] == [1]
    assert complete_checkpoints(b) == [checkpoint_dir(b, 1)]

    # the server restarted on its port: the resume ends as the run whose server never died
    server = _serve(port)
    try:
        res_b = serl_start("--resume", b).wait(timeout=900)
    finally:
        _kill(server)
    for res in (res_a, res_b):
        assert res.returncode == 0, res.stderr[-3000:]
    assert _metrics(b) == _metrics(a) and [m["step"] for m in _metrics(a)] == [1, 2]
    spec = importlib.util.spec_from_file_location("_resume_helpers", ROOT / "tests" / "run" / "test_resume.py")
    helpers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helpers)
    assert helpers._checkpoint_differences(checkpoint_dir(a, 2), checkpoint_dir(b, 2)) == []
