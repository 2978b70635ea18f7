"""Bad SPIRAL input: exit code 2, a message naming the option, and no run directory (`serl eval
--games` refusals: tests/recipes/spiral/test_spiral_evaluate.py). Each case runs the command in this process
(conftest's train_here): all are refused before a model loads, where a subprocess each cost
about 2 s of interpreter start and imports."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "flags,message",
    [
        (
            ["--games", "kuhn_poker,chess"],
            "unknown game 'chess'; known games: tictactoe, kuhn_poker, simple_negotiation, liars_dice, nim",
        ),
        (["--opponent", "population", "--population_size", "0"], "population_size: must be >= 1, got 0"),
        (
            ["--opponent", "fixed:no/such/snapshot.safetensors"],
            "snapshot path 'no/such/snapshot.safetensors' does not exist",
        ),
        (["--opponent", "everyone"], "opponent: must be self, random, population or fixed:PATH"),
        (["--fsp_start_from", "3"], "fsp_start_from: delays the population, but --opponent is 'self'"),
        (["--filter_draw", "--max_draw_retries", "-1"], "max_draw_retries: must be >= 0, got -1"),
        (["--gamma", "1.5"], "turn_discount: must be in [0, 1], got 1.5"),
    ],
)
def test_train_refuses_with_exit_2_and_no_run_dir(tmp_path, train_here, monkeypatch, flags, message):
    run_dir = tmp_path / "run"
    monkeypatch.chdir(ROOT)  # as the subprocess ran: the snapshot path is relative
    rc, err = train_here("--recipe", "spiral", "--generator", "hf", "--run_dir", run_dir, *flags)
    assert rc == 2, err[-2000:]
    assert message in err
    assert not run_dir.exists()
