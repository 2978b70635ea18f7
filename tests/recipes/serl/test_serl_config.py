"""SeRL's own option checks: bad combinations are refused before any work, with the option named."""

import json
import subprocess
import sys

import pytest

from serl import ConfigError, DataError
from serl.config.parser import parse_args
from serl.recipes.serl.recipe import SerlRecipe


@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--reward_mode", "rule"], "reward_mode: rule needs a label"),
        (["--max_refill_rounds", "0"], "max_refill_rounds: must be >= 1"),
        (["--instructions_num_per_iteration", "-1"], "instructions_num_per_iteration: must be >= 0"),
        (["--prompt_max_len", "0"], "prompt_max_len: must be >= 1"),
        (["--reward_difficulty_bounds", "0.9", "0.1"], "reward_difficulty_bounds"),
    ],
)
def test_bad_options_are_refused(flags, needle):
    with pytest.raises(ConfigError, match=needle):
        parse_args(flags)


@pytest.mark.parametrize(
    "flags",
    [
        ["--reward_mode", "rule", "--enable_self_evolution", "false"],  # labelled seeds: the rule reward
        ["--reward_mode", "auto"],  # generated problems are voted
        ["--reward_mode", "majority"],
    ],
)
def test_reward_modes_that_work(flags):
    parse_args(flags)


def test_rule_reward_with_self_evolution_exits_2_before_any_work(tmp_path):
    run_dir = tmp_path / "run"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "serl.cli",
            "train",
            "--reward_mode",
            "rule",
            "--run_dir",
            str(run_dir),
            "--generator",
            "hf",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2, r.stderr
    for name in ("reward_mode", "--enable_self_evolution", "auto", "majority"):
        assert name in r.stderr
    assert "Traceback" not in r.stderr and not run_dir.exists()


def test_rule_reward_needs_every_seed_labelled(tmp_path):
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text(json.dumps({"problem": "1 + 1?", "answer": "2"}) + "\n" + json.dumps({"problem": "2 + 2?"}) + "\n")
    cfg, _ = parse_args(["--reward_mode", "rule", "--enable_self_evolution", "false", "--prompt_data", str(seeds)])
    with pytest.raises(DataError, match=r"seeds.jsonl: row 2 has no 'answer' label"):
        SerlRecipe.prepare(cfg)
    cfg.reward_mode = "auto"
    assert [s.label for s in SerlRecipe.prepare(cfg)] == ["2", None]
