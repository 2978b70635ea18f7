"""Option sections: a recipe refuses the common options of sections it does not honour."""

from __future__ import annotations

import dataclasses

import pytest

from serl import ConfigError
from serl.cli import train
from serl.config.files import load_yaml
from serl.config.options import TrainConfig
from serl.config.parser import build_parser, parse_args
from serl.config.registry import config_class, recipe_names
from serl.config.sections import SECTION_OF, SECTIONS, declared, ignored


def test_every_common_option_is_in_one_section():
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    listed = [n for _, opts in SECTIONS.values() for n in opts]
    assert sorted(listed) == sorted(names) and len(listed) == len(set(listed))


@pytest.mark.parametrize(
    "flag,value",
    [
        ("--prompt_data", "x.jsonl"),
        ("--n_samples_per_prompt", "4"),
        ("--reward_mode", "rule"),
        ("--eval_data", "x.jsonl"),
        ("--seed_data", "x.jsonl"),
    ],
)  # an alias too
def test_spiral_refuses_what_it_ignores(flag, value, capsys):
    with pytest.raises(SystemExit) as e:
        train.main(["--recipe", "spiral", flag, value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"{flag} is not used by recipe 'spiral'" in err


def test_the_command_of_the_issue_exits_2(tmp_path):
    import subprocess
    import sys

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "serl.cli",
            "train",
            "--recipe",
            "spiral",
            "--prompt_data",
            "x.jsonl",
            "--run_dir",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "recipe 'spiral'" in r.stderr and not (tmp_path / "run").exists()


def test_spin_refuses_the_kl_options(capsys):
    with pytest.raises(SystemExit) as e:
        train.main(["--recipe", "spin", "--init_kl_coef", "0.01"])
    assert e.value.code == 2
    assert "--init_kl_coef is not used by recipe 'spin'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "recipe,own",
    [
        ("serl", ["--enable_self_evolution", "false"]),
        ("spin", ["--beta", "0.2"]),
        ("spiral", ["--games_per_step", "4"]),
        ("spell", ["--cluster_size", "2"]),
    ],
)
def test_own_and_shared_options_still_pass(recipe, own):
    shared = [
        "--steps",
        "2",
        "--seed",
        "7",
        "--generator",
        "hf",
        "--actor_learning_rate",
        "1e-5",
        "--lora_rank",
        "4",
        "--ray_address",
        "auto",
        "--run_dir",
        "runs/x",
    ]
    cfg, _ = parse_args(["--recipe", recipe, *shared, *own])
    assert (cfg.recipe, cfg.steps, cfg.seed, cfg.actor_learning_rate, cfg.lora_rank) == (recipe, 2, 7, 1e-5, 4)


def test_declared_sections():
    assert declared(config_class("serl")) == tuple(SECTIONS)  # all, "run" first
    assert set(ignored(config_class("spiral"))) >= {
        "prompt_data",
        "seed_data",
        "n_samples_per_prompt",
        "reward_mode",
        "eval_data",
        "advantage_estimator",
    }
    assert "init_kl_coef" in ignored(config_class("spin")) and "beta" not in ignored(config_class("spin"))
    for r in recipe_names():  # the run's own options are every recipe's
        assert not set(ignored(config_class(r))) & set(SECTIONS["run"][1])


def test_help_lists_only_what_the_recipe_reads():
    text = build_parser(config_class("spiral")).format_help()
    assert "--games_per_step" in text and "common options: the run" in text
    assert "--prompt_data" not in text and "--reward_mode" not in text and "math reward" not in text
    assert "--prompt_data" in build_parser(config_class("serl")).format_help()


def _yaml(tmp_path, text: str) -> str:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return str(p)


def test_a_preset_that_restates_a_default_is_no_request(tmp_path):
    """A shared YAML preset may hold options SPIRAL ignores at their defaults (SPIRAL's own
    prompt_data default is ''; the common n_samples_per_prompt default is 4)."""
    cls = config_class("spiral")
    assert load_yaml(_yaml(tmp_path, "prompt_data: ''\nn_samples_per_prompt: 4\nsteps: 5\n"), cls) == {
        "prompt_data": "",
        "n_samples_per_prompt": 4,
        "steps": 5,
    }
    cfg, _ = parse_args(["--recipe", "spiral", "--config", _yaml(tmp_path, "n_samples_per_prompt: 4\n")])
    assert cfg.n_samples_per_prompt == 4


@pytest.mark.parametrize(
    "line,key",
    [
        ("n_samples_per_prompt: 8", "n_samples_per_prompt"),
        ("seed_data: x.jsonl", "seed_data"),
        ("reward_mode: rule", "reward_mode"),
    ],
)
def test_a_preset_that_asks_for_an_ignored_value_is_refused(tmp_path, line, key):
    with pytest.raises(ConfigError, match=f"option '{key}' is not used by recipe 'spiral'"):
        load_yaml(_yaml(tmp_path, line + "\n"), config_class("spiral"))


def test_a_runs_own_saved_config_is_never_refused(tmp_path):
    """config.yaml holds every option; a resume must read an older run's file as it is."""
    path = _yaml(tmp_path, "recipe: spiral\nn_samples_per_prompt: 8\n")
    assert load_yaml(path, config_class("spiral"), saved=True)["n_samples_per_prompt"] == 8
    cfg, _ = parse_args(["--config", path], saved=True)
    assert cfg.recipe == "spiral"


def test_section_names_are_checked():
    @dataclasses.dataclass
    class Bad(TrainConfig):
        SECTIONS = ("run", "seeds")

    with pytest.raises(TypeError, match="unknown section"):
        declared(Bad)
    assert SECTION_OF["prompt_data"] == "seed_data"
