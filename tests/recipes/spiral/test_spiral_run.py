"""Real SPIRAL runs on SmolLM2 (transformers generator): two steps of TicTacToe against a population of
2, and a resume that continues exactly (baselines, population, metrics)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[3]
TINY = ["--recipe", "spiral", "--generator", "hf", "--device", "cpu", "--games", "tictactoe", "--games_per_step", "2",
        "--max_turns", "4", "--generate_max_len", "12", "--opponent", "population", "--population_size", "2",
        "--population_every", "1", "--mask_truncated", "false", "--filter_zero_adv", "false",
        "--ppo_epochs", "2", "--actor_learning_rate", "1e-4", "--progress", "quiet", "--save_model", "false",
        "--save_steps", "1", "--max_ckpt_num", "2", "--seed", "3"]


def train(*args):
    return subprocess.run([sys.executable, "-m", "serl.cli", "train", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)


def metrics(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/") and k != "wall_time"} for r in rows]


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory, smol_path):
    run = tmp_path_factory.mktemp("spiral") / "a"
    r = train("--run_dir", run, "--steps", "2", *TINY)
    assert r.returncode == 0, r.stderr[-3000:]
    return run


@pytest.mark.slow
def test_two_steps_of_tictactoe_with_a_population_of_two(two_steps):
    rows = metrics(two_steps)
    assert [r["step"] for r in rows] == [1, 2]
    first, second = rows
    assert first["spiral/opponent/self"] == 1.0  # no snapshot before step 1
    assert second["spiral/population/size"] == 2 and second["spiral/learner_turns"] > 0
    assert "spiral/baseline/tictactoe/role0" in second and "actor/updates" in second
    assert second["actor/updates"] == 4.0  # 2 steps x 2 PPO epochs (every step had samples)
    snaps = sorted(p.name for p in (two_steps / "snapshots").glob("*.safetensors"))
    assert "step_000002.safetensors" in snaps
    from serl.engines.snapshots import load_snapshot

    w = load_snapshot(two_steps / "snapshots/step_000002.safetensors")
    assert all(t.dtype == torch.bfloat16 for t in w.values()) and "model.embed_tokens.weight" in w
    assert (two_steps / "report" / "games.png").is_file()


@pytest.mark.slow
def test_resume_restores_baselines_and_population_exactly(two_steps, tmp_path):
    b = tmp_path / "b"
    r = train("--run_dir", b, "--steps", "1", *TINY)
    assert r.returncode == 0, r.stderr[-3000:]
    r = train("--resume", b, "--steps", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    assert metrics(b) == metrics(two_steps)  # baselines, opponents, losses: the same to the last digit
    from serl.checkpoint import latest_checkpoint, load_trainer_state

    sa, sb = (load_trainer_state(latest_checkpoint(d)) for d in (two_steps, b))
    assert sa["baselines"] == sb["baselines"] and sa["pool"] == sb["pool"]


@pytest.mark.slow
def test_serl_eval_games_against_random_and_a_snapshot(two_steps, tmp_path):
    snap = two_steps / "snapshots/step_000002.safetensors"
    r = subprocess.run([sys.executable, "-m", "serl.cli", "eval", "--games", "kuhn_poker", "--n_games", "4",
                        "--opponents", f"random,{snap}", "--exploit_samples", "1", "--max_new_tokens", "12",
                        "--generator", "hf", "--device", "cpu", "--output_dir", str(tmp_path / "out")],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((tmp_path / "out" / "games.json").read_text())["metrics"]
    for opp in ("random", "fixed"):
        assert res[f"eval/kuhn_poker/vs_{opp}/n"] == 4
        assert 0 <= res[f"eval/kuhn_poker/vs_{opp}/invalid_rate"] <= 1
    assert 0 <= res["eval/kuhn_poker/exploitability"] <= 2
    assert "kuhn_poker/vs_fixed" in r.stdout
