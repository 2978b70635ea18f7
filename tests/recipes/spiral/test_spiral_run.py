"""The one real SPIRAL run on SmolLM2 (transformers generator): two steps of TicTacToe against a
population of 2, killed (SIGKILL) as step 2 starts and resumed. The resumed step must continue the
baselines and the population (its snapshots, evictions and RNG); that a resumed step equals an
uninterrupted one to the last digit is checked on stand-in engines (test_spiral_recipe.py), and for the
runner by tests/run/test_resume.py. Sizes are the smallest that still train: one PPO epoch, 12 new tokens."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[3]
TINY = [
    "--recipe",
    "spiral",
    "--generator",
    "hf",
    "--device",
    "cpu",
    "--games",
    "tictactoe",
    "--games_per_step",
    "2",
    "--max_turns",
    "4",
    "--generate_max_len",
    "12",
    "--opponent",
    "population",
    "--population_size",
    "2",
    "--population_every",
    "1",
    "--mask_truncated",
    "false",
    "--filter_zero_adv",
    "false",
    "--ppo_epochs",
    "1",
    "--actor_learning_rate",
    "1e-4",
    "--progress",
    "quiet",
    "--save_model",
    "false",
    "--save_steps",
    "1",
    "--max_ckpt_num",
    "1",
    "--seed",
    "3",
]
SNAP1, SNAP2 = "snapshots/step_000001.safetensors", "snapshots/step_000002.safetensors"


def train(*args, fault="", code=0):
    # one intra-op thread: on a shared machine two threads spin-wait (3-4x the CPU time, 2x the wall time)
    env = {**os.environ, "SERL_FAULT": fault, "OMP_NUM_THREADS": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "serl.cli", "train", *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == code, r.stderr[-3000:]


@pytest.mark.slow
def test_two_steps_of_tictactoe_with_a_population_of_two_resumed_after_one(tmp_path, smol_path):
    from serl.recipes.spiral.population import SnapshotPool
    from serl.recipes.spiral.snapshots import CURRENT, load_snapshot
    from serl.run.checkpoint import latest_checkpoint, load_trainer_state

    run = tmp_path / "run"
    train("--run_dir", run, "--steps", "2", *TINY, fault="generate:2", code=-9)  # killed as step 2 starts
    state1 = load_trainer_state(latest_checkpoint(run))
    assert state1["step"] == 1
    train("--resume", run)
    first, second = rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert first["spiral/opponent/self"] == 1.0  # no snapshot before step 1
    assert second["spiral/population/size"] == 2 and second["spiral/learner_turns"] > 0
    assert second["actor/updates"] == 2.0  # one per step, the count carried over the resume

    # baselines: step 1 starts them at 0, the resumed step 2 continues them (EMA, alpha 0.95)
    b1 = {r: first[f"spiral/baseline/tictactoe/role{r}"] for r in (0, 1)}
    assert b1 == {r: pytest.approx(0.05 * first[f"spiral/tictactoe/role{r}/reward"]) for r in (0, 1)}
    assert any(b1.values()), "every step-1 return was 0: the baselines would not show a resume"
    for r in (0, 1):
        assert second[f"spiral/baseline/tictactoe/role{r}"] == pytest.approx(
            0.95 * b1[r] + 0.05 * second[f"spiral/tictactoe/role{r}/reward"]
        )

    # population: step 2 drew the opponents the restored pool draws, then evicted step 1's snapshot
    pool = SnapshotPool(2, 1)
    pool.load_state_dict(state1["recipe"]["pool"])
    assert pool.entries() == [SNAP1, CURRENT]
    drawn = pool.sample(2)
    assert second.get("spiral/opponent/self", 0.0) == drawn.count(CURRENT) / 2
    assert second.get("spiral/opponent/snapshot", 0.0) == drawn.count(SNAP1) / 2
    state2 = load_trainer_state(latest_checkpoint(run))
    own = state2["recipe"]  # the recipe's own part of the run state (serl.run.state)
    assert own["pool"]["snapshots"] == [SNAP2] and [tuple(t) for t in own["trash"]] == [(2, SNAP1)]
    w = load_snapshot(run / SNAP2)
    assert all(t.dtype == torch.bfloat16 for t in w.values()) and "model.embed_tokens.weight" in w
    assert (run / "report" / "games.png").is_file()
