"""Real SPIN and online-DPO runs on SmolLM2 with tiny sizes (transformers generator).

Iteration 0 is one step (2 prompts, 1 answer each, 2 pairs per step); iteration 1 trains
its 2 new pairs with the 2 previous ones, in 2 steps."""

import json
import math
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]

TINY_SPIN = [
    "--recipe",
    "spin",
    "--generator",
    "hf",
    "--iteration_size",
    "2",
    "--rollout_batch_size",
    "2",
    "--epochs_per_iteration",
    "1",
    "--generate_max_len",
    "12",
    "--actor_learning_rate",
    "5e-5",
    "--lr_warmup_ratio",
    "0",
    "--micro_train_batch_size",
    "4",
    "--progress",
    "quiet",
    "--save_model",
    "false",
    "--max_ckpt_num",
    "3",
    "--prompt_data",
    str(ROOT / "dataset/arith_spin_train.jsonl"),
]


def metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def without_times(rows):
    return [{k: v for k, v in r.items() if not k.startswith("time/") and k != "wall_time"} for r in rows]


# online DPO with the label-free vote: 2 prompts x 4 samples, two steps
ONLINE = [
    "--recipe",
    "spin",
    "--spin_mode",
    "online",
    "--generator",
    "hf",
    "--steps",
    "2",
    "--rollout_batch_size",
    "2",
    "--n_samples_per_prompt",
    "4",
    "--generate_max_len",
    "16",
    "--reward_mode",
    "majority",
    "--progress",
    "quiet",
    "--save_model",
    "false",
    "--report",
    "false",
    "--prompt_data",
    str(ROOT / "dataset/arith_spin_train.jsonl"),
]


@pytest.fixture(scope="module")
def spin_runs(serl_start, tmp_path_factory):
    """The 3-step SPIN run and, beside it, the online-DPO run: they need nothing from each other
    (conftest's serl_start: one thread each; the resume below uses the same count)."""
    root = tmp_path_factory.mktemp("spin")
    spin, online = root / "run", root / "online"
    runs = [serl_start(*TINY_SPIN, "--steps", "3", "--run_dir", spin), serl_start(*ONLINE, "--run_dir", online)]
    for r in [run.wait(timeout=900) for run in runs]:
        assert r.returncode == 0, r.stderr[-3000:]
    yield spin, online
    shutil.rmtree(root, ignore_errors=True)  # about 8 GB of checkpoints


@pytest.fixture(scope="module")
def spin_run(spin_runs):
    return spin_runs[0]


def test_two_iterations_raise_the_real_answer_logprob(spin_run):
    rows = metrics(spin_run)
    assert [r["spin/iteration"] for r in rows] == [0, 1, 1]
    assert [r.get("spin/pairs") for r in rows] == [2, 4, None]
    # the human answers' per-token log-prob under the policy at each iteration start
    assert rows[1]["spin/real_logp"] > rows[0]["spin/real_logp"]
    for r in rows:
        for k in (
            "dpo/reward_chosen",
            "dpo/reward_rejected",
            "dpo/margin",
            "dpo/accuracy",
            "dpo/chosen_logp",
            "time/generate" if "spin/pairs" in r else "time/learner",
        ):
            assert math.isfinite(r[k]), k
    assert rows[0]["loss/policy"] == pytest.approx(math.log(2), abs=1e-3)  # reference = policy: margin 0
    report = spin_run / "report"
    assert (report / "dpo.png").is_file()
    assert "dpo/accuracy" in (report / "summary.md").read_text()


def test_resume_across_the_iteration_boundary_is_exact(spin_run, serl_start, cut_back, tmp_path):
    # the run stopped after step 1 is a copy of the 3-step one cut back to its step-1 checkpoint
    # (a second run of one step costs about 20 s of CI); resuming drops its later metrics lines
    run_dir = cut_back(spin_run, tmp_path / "run", 1)
    # step 2 starts iteration 1 (new answers, mixing, reference); step 3 uses the kept one
    r = serl_start("--resume", run_dir, "--steps", "3").wait(timeout=900)  # one thread, as spin_run
    assert r.returncode == 0, r.stderr[-3000:]
    assert without_times(metrics(run_dir)) == without_times(metrics(spin_run))


def test_online_dpo_runs_with_the_majority_vote(spin_runs):
    run_dir = spin_runs[1]
    rows = metrics(run_dir)
    assert len(rows) == 2
    assert sum(r["pairs/pairs"] for r in rows) >= 1
    for r in rows:
        assert r["pairs/groups"] == 2 and r["pairs/pairs"] + r["pairs/dropped"] == 2
        assert 0.0 <= r["reward/mean"] <= 1.0
        if r["pairs/pairs"]:
            assert math.isfinite(r["dpo/margin"]) and r["loss/policy"] == pytest.approx(math.log(2), abs=1e-3)
