import subprocess
import sys

import pytest

from serl import ConfigError
from serl.config.files import load_yaml
from serl.config.options import TrainConfig
from serl.config.parser import build_parser, parse_args


def test_defaults_validate():
    TrainConfig().validate()


def test_yaml_then_flags_override(tmp_path):
    y = tmp_path / "c.yaml"
    y.write_text("steps: 7\npretrain: foo\nreward_difficulty_bounds: [0.1, 0.9]\n")
    cfg, _ = parse_args(["--config", str(y), "--steps", "9"])
    assert cfg.steps == 9 and cfg.model == "foo" and cfg.reward_difficulty_bounds == [0.1, 0.9]


@pytest.mark.parametrize(
    "yaml_text,needle",
    [
        ("stepz: 3\n", "unknown option 'stepz'"),
        ("steps: many\n", "option 'steps': expected int"),
        ("bf16: maybe\n", "option 'bf16': expected one of auto, true, false, got 'maybe'"),
        ("- a\n- b\n", "expected a mapping"),
        ("steps: 3\n  bad: 1\n", "c.yaml:2: not valid YAML (mapping values are not allowed here)"),
        (
            "steps: 3\nmodel: 'smol\nseed: 1\n",
            "c.yaml:4: not valid YAML (found unexpected end of stream, "
            "while scanning a quoted scalar that begins on line 2)",
        ),
        (b"steps: 3\nmodel: sm\xffol\n", "c.yaml:2: not UTF-8 text (byte 0xff at byte 10 of the line"),
        (
            "seed: 42\nsteps: 3\nseed: 7\n",
            "c.yaml:3: not valid YAML (key 'seed' is given twice (first on line 1); keep one)",
        ),
        ("lora:\n  r: 8\n  r: 16\n", "c.yaml:3: not valid YAML (key 'r' is given twice (first on line 2)"),
    ],
)
def test_yaml_errors_name_file_and_field(tmp_path, yaml_text, needle):
    y = tmp_path / "c.yaml"
    y.write_bytes(yaml_text if isinstance(yaml_text, bytes) else yaml_text.encode())
    with pytest.raises(ConfigError) as e:
        load_yaml(str(y))
    assert str(y) in str(e.value) and needle in str(e.value)


def test_an_option_of_another_recipe_names_both_recipes(tmp_path):
    y = tmp_path / "c.yaml"
    y.write_text("recipe: serl\nmax_refill_rounds: 2\n")
    with pytest.raises(ConfigError) as e:
        parse_args(["--config", str(y), "--recipe", "spin"])
    assert str(e.value) == f"{y}: option 'max_refill_rounds' belongs to recipe 'serl', not to recipe 'spin'"


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--reward_difficulty_bounds", "0.9", "0.1"], "reward_difficulty_bounds"),
        (["--n_samples_per_prompt", "0"], "n_samples_per_prompt"),
        (["--generator", "tpu"], "--generator"),
        (["--colocate_all_models"], "colocate_all_models: needs --ray"),
        (["--advantage_estimator", "ppo_magic"], "advantage_estimator: unknown advantage estimator"),
        (["--advantage_estimator", "grpo", "--init_kl_coef", "0.001"], "add --use_kl_loss"),
        (["--generator", "hf", "--vllm_enable_sleep"], "vllm_enable_sleep"),
        (["--param_offload", "--zero_stage", "2"], "param_offload"),
    ],
)
def test_bad_values_name_the_field(argv, needle, capsys):
    with pytest.raises((ConfigError, SystemExit)) as e:
        parse_args(argv)
    text = str(e.value) + capsys.readouterr().err
    assert needle in text


def test_serl_flag_names_accepted():
    cfg, _ = parse_args(
        [
            "--pretrain",
            "m",
            "--save_path",
            "out",
            "--seed_data",
            "s.jsonl",
            "--enable_self_evolution",
            "--actor_learning_rate",
            "1e-6",
        ]
    )
    assert (cfg.model, cfg.run_dir, cfg.prompt_data, cfg.enable_self_evolution) == ("m", "out", "s.jsonl", True)
    assert cfg.actor_learning_rate == 1e-6


def test_every_field_has_help():
    text = build_parser().format_help()
    import dataclasses

    for f in dataclasses.fields(TrainConfig):
        assert f.metadata.get("help"), f.name
        assert f"--{f.name}" in text


def test_unknown_flag_exits_2():
    r = subprocess.run(
        [sys.executable, "-m", "serl.cli", "train", "--no_such_flag", "1"], capture_output=True, text=True
    )
    assert r.returncode == 2 and "no_such_flag" in r.stderr


@pytest.mark.parametrize("recipe", ["serl", "spin", "spiral", "spell"])
def test_help_prints_for_every_recipe(recipe, capsys):
    """Every option's help formats (a bare % in one once broke --help for all of them)."""
    with pytest.raises(SystemExit) as e:
        parse_args(["--recipe", recipe, "--help"])
    assert e.value.code == 0 and "--vllm_enforce_eager" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv,yaml_text,want",
    [
        ([], "", "auto"),  # the default follows the machine (serl.engines.precision)
        (["--bf16"], "", "true"),  # OpenRLHF's bare flag
        (["--no_bf16"], "", "false"),
        (["--bf16", "Auto"], "", "auto"),
        (["--bf16", "0"], "", "false"),
        ([], "bf16: true\n", "true"),  # the YAML of older configs (and the seeds' templates)
        ([], "bf16: no\n", "false"),
        (["--bf16", "false"], "bf16: true\n", "false"),
    ],
)
def test_bf16_is_auto_true_or_false(tmp_path, argv, yaml_text, want):
    extra = []
    if yaml_text:
        (tmp_path / "c.yaml").write_text(yaml_text)
        extra = ["--config", str(tmp_path / "c.yaml")]
    cfg, _ = parse_args(extra + argv)
    assert cfg.bf16 == want and cfg.generator_dtype == "auto"


def test_a_saved_config_of_an_older_run_reads_its_bool():
    from serl.config.options import config_from_dict

    assert config_from_dict({"recipe": "serl", "bf16": True}).bf16 == "true"
    with pytest.raises(ConfigError, match="bf16: expected auto, true or false"):
        config_from_dict({"recipe": "serl", "bf16": "sometimes"})
