"""A `serl train --ray` run stopped after its first step and resumed ends exactly as the
uninterrupted `--ray` run (transformers generator in a Ray actor): the same metrics, policy
weights and run state. Before serl.run.state, GeneratorGroup had no state, so a resumed run
re-seeded sampling from call 0 and drew other samples. The stopped run is a copy of the
uninterrupted one cut back to its step-1 checkpoint, what a run killed before its second update
leaves (a third Ray run, killed there, cost about 40 s of CI; tests/run/test_resume.py kills runs
at every point)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed"),
]
# two SeRL steps on the seeds (sampled: temperature 1), a torch learner, one HF engine
FLAGS = [
    "--pretrain",
    "smollm2",
    "--prompt_data",
    str(ROOT / "dataset" / "arith_seed.jsonl"),
    "--steps",
    "2",
    "--rollout_batch_size",
    "1",
    "--n_samples_per_prompt",
    "2",
    "--generate_max_len",
    "16",
    "--max_refill_rounds",
    "1",
    "--enable_self_evolution",
    "false",
    "--reward_difficulty_bounds",
    "0",
    "1",
    "--generator",
    "hf",
    "--learner",
    "torch",
    "--actor_num_gpus_per_node",
    "1",
    "--vllm_num_engines",
    "1",
    "--init_kl_coef",
    "0",
    "--actor_learning_rate",
    "1e-4",
    "--lr_warmup_ratio",
    "0",
    "--save_steps",
    "1",
    "--save_model",
    "false",
    "--progress",
    "quiet",
    "--report",
    "false",
    "--ray",
]


def _train(args):
    env = dict(os.environ, SERL_FAULT="", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("RAY_ADDRESS", None)  # a local cluster of its own
    proc = subprocess.Popen(
        [sys.executable, "-m", "serl.cli", "train", *map(str, args)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=1800)
    finally:
        time.sleep(1.0)
        try:  # whatever the run started and left (a driver that dies cannot stop its actors)
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return proc.returncode, err


def _metrics(run_dir):
    return [
        {k: v for k, v in json.loads(line).items() if not k.startswith("time/") and k != "wall_time"}
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]


def test_a_ray_run_stopped_and_resumed_matches_the_uninterrupted_one(tmp_path, cut_back):
    from serl.run.checkpoint import latest_checkpoint, load_trainer_state

    spec = importlib.util.spec_from_file_location("_resume_helpers", ROOT / "tests" / "run" / "test_resume.py")
    helpers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helpers)

    a, b = tmp_path / "a", tmp_path / "b"
    rc, err = _train(["--save_path", a, *FLAGS])
    assert rc == 0, err[-3000:]
    cut_back(a, b, 1)  # stopped before step 2's update: its step-2 metrics line stays, to be dropped
    assert latest_checkpoint(b).name == "step_000001"
    rc, err = _train(["--resume", b])
    assert rc == 0, err[-3000:]

    assert _metrics(b) == _metrics(a)
    ca, cb = latest_checkpoint(a), latest_checkpoint(b)
    assert ca.name == cb.name == "step_000002"
    assert helpers._checkpoint_differences(ca, cb) == []
    # the engine's call count is saved and restored: step 2 sampled with the same seeds
    state = load_trainer_state(cb)
    assert state["generator"] == {"engines": [{"calls": 2}]}
