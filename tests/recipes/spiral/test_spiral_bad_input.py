"""Bad SPIRAL input: exit code 2, a message naming the option, and no run directory (`serl eval
--games` refusals: tests/eval/test_eval_games.py)."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def serl(*args):
    return subprocess.run([sys.executable, "-m", "serl.cli", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("flags,message", [
    (["--games", "kuhn_poker,chess"], "unknown game 'chess'; known games: tictactoe, kuhn_poker, "
                                      "simple_negotiation, liars_dice, nim"),
    (["--opponent", "population", "--population_size", "0"], "population_size: must be >= 1, got 0"),
    (["--opponent", "fixed:no/such/snapshot.safetensors"], "snapshot path 'no/such/snapshot.safetensors' "
                                                           "does not exist"),
    (["--opponent", "everyone"], "opponent: must be self, random, population or fixed:PATH"),
    (["--fsp_start_from", "3"], "fsp_start_from: delays the population, but --opponent is 'self'"),
    (["--filter_draw", "--max_draw_retries", "-1"], "max_draw_retries: must be >= 0, got -1"),
    (["--gamma", "1.5"], "turn_discount: must be in [0, 1], got 1.5"),
])
def test_train_refuses_with_exit_2_and_no_run_dir(tmp_path, flags, message):
    run_dir = tmp_path / "run"
    r = serl("train", "--recipe", "spiral", "--generator", "hf", "--run_dir", run_dir, *flags)
    assert r.returncode == 2, r.stderr[-2000:]
    assert message in r.stderr
    assert not run_dir.exists()

