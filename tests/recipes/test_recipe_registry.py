"""The recipe seam's command line: --recipe picks the options; bad input exits 2 with no run dir."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from serl import ConfigError
from serl.config.parser import parse_args
from serl.config.registry import config_class, recipe_names

ROOT = Path(__file__).resolve().parents[2]


def _train(tmp_path, *args):
    run = tmp_path / "run"
    r = subprocess.run(
        [sys.executable, "-m", "serl.cli", "train", "--run_dir", str(run), "--generator", "hf", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    return r, run


def test_default_recipe_is_serl_and_yaml_can_name_it(tmp_path):
    cfg, _ = parse_args([])
    assert cfg.recipe == "serl" and type(cfg) is config_class("serl")
    y = tmp_path / "c.yaml"
    y.write_text("recipe: serl\nsteps: 4\n")
    cfg, _ = parse_args(["--config", str(y)])
    assert cfg.recipe == "serl" and cfg.steps == 4


def test_every_recipe_config_has_docs_and_knows_its_name():
    import dataclasses

    for name in recipe_names():
        cls = config_class(name)
        assert cls.RECIPE == name and cls().recipe == name
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help"), (name, f.name)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--recipe", "nope"], "unknown recipe 'nope'"),
        (["--device", "cuda"], "device: cuda was asked for"),
    ],
)
def test_bad_recipe_or_device_exits_2_without_run_dir(tmp_path, args, needle):
    if "cuda" in args and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    r, run = _train(tmp_path, *args)
    assert r.returncode == 2 and needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not run.exists()


def test_unknown_recipe_lists_the_known_ones(tmp_path):
    r, run = _train(tmp_path, "--recipe", "nope")
    assert all(name in r.stderr for name in recipe_names())
    y = tmp_path / "c.yaml"
    y.write_text("recipe: nope\n")
    with pytest.raises(ConfigError, match="unknown recipe 'nope'; known: serl"):
        parse_args(["--config", str(y)])


def test_option_of_another_recipe_names_its_owner(tmp_path, monkeypatch):
    """A second recipe registered from a user package: SeRL's options are refused for it
    (flag and YAML), naming 'serl'; its own option is refused for SeRL."""
    pkg = tmp_path / "other_recipe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "config.py").write_text(
        "from dataclasses import dataclass\nfrom typing import ClassVar\n"
        "from serl.config.options import TrainConfig, option\n\n\n@dataclass\nclass Config(TrainConfig):\n"
        "    RECIPE: ClassVar[str] = 'other'\n    other_knob: int = option(1, 'a knob')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from serl.config import registry

    registry.register("other", "other_recipe")
    try:
        with pytest.raises(SystemExit) as e:
            parse_args(["--recipe", "other", "--enable_self_evolution", "false"])
        assert e.value.code == 2
        with pytest.raises(SystemExit):
            parse_args(["--other_knob", "3"])
        y = tmp_path / "c.yaml"
        y.write_text("recipe: other\nrollout_batch_size: 2\noverlong_filter: true\n")
        with pytest.raises(ConfigError, match="option 'overlong_filter' belongs to recipe 'serl'"):
            parse_args(["--config", str(y)])
        cfg, _ = parse_args(["--recipe", "other", "--other_knob", "3"])
        assert cfg.other_knob == 3 and not hasattr(cfg, "overlong_filter")
    finally:
        registry.RECIPES.pop("other")
        registry.config_class.cache_clear()


def test_foreign_flag_message_on_the_command_line(tmp_path, capsys):
    from serl.config import registry

    pkg = tmp_path / "other2"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "config.py").write_text(
        "from dataclasses import dataclass\nfrom typing import ClassVar\nfrom serl.config.options import TrainConfig\n\n\n"
        "@dataclass\nclass Config(TrainConfig):\n    RECIPE: ClassVar[str] = 'other2'\n"
    )
    sys.path.insert(0, str(tmp_path))
    registry.register("other2", "other2")
    try:
        with pytest.raises(SystemExit):
            parse_args(["--recipe", "other2", "--few_shot_generation", "4"])
        err = capsys.readouterr().err
        assert "--few_shot_generation belongs to recipe 'serl'" in err
    finally:
        sys.path.remove(str(tmp_path))
        registry.RECIPES.pop("other2")
        registry.config_class.cache_clear()


def test_help_lists_common_then_recipe_options():
    r = subprocess.run(
        [sys.executable, "-m", "serl.cli", "train", "--recipe", "serl", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 0
    body = r.stdout[r.stdout.index("common options") :]  # past the usage line
    assert body.index("--steps") < body.index("options of the 'serl' recipe") < body.index("--enable_self_evolution")
