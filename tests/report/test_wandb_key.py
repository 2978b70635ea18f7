"""--use_wandb KEY (OpenRLHF's form): the key reaches W&B through WANDB_API_KEY and
nowhere else: not the config, config.yaml, an error message."""

import subprocess
import sys

import pytest

from serl import ConfigError
from serl.config.files import dump, load_yaml
from serl.config.parser import parse_args
from serl.report.metrics import wandb_mode

SECRET = "0123456789abcdef0123456789abcdef01234567"  # the shape of a W&B key, not a real one


@pytest.mark.parametrize("value, on", [("true", True), ("false", False), ("1", True), ("off", False)])
def test_boolean_values_keep_their_meaning(value, on, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    cfg, _ = parse_args(["--use_wandb", value])
    assert cfg.use_wandb is on
    assert "WANDB_API_KEY" not in __import__("os").environ


def test_a_key_turns_wandb_on_and_is_kept_only_in_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    cfg, _ = parse_args(["--use_wandb", SECRET])
    assert cfg.use_wandb is True
    assert __import__("os").environ["WANDB_API_KEY"] == SECRET
    env = {"WANDB_API_KEY": __import__("os").environ["WANDB_API_KEY"]}  # WANDB_MODE aside
    assert wandb_mode(env, netrc_path=tmp_path / "none") == "online"
    assert SECRET not in repr(cfg)
    dump(cfg, tmp_path / "config.yaml")
    assert SECRET not in (tmp_path / "config.yaml").read_text()


def test_a_key_in_yaml_and_a_malformed_value_are_never_echoed(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    (tmp_path / "c.yaml").write_text(f"use_wandb: {SECRET}\n")
    assert load_yaml(str(tmp_path / "c.yaml"))["use_wandb"] is True
    bad = "short-" + SECRET[:8] + "!"
    (tmp_path / "bad.yaml").write_text(f"use_wandb: '{bad}'\n")
    with pytest.raises(ConfigError) as e:
        load_yaml(str(tmp_path / "bad.yaml"))
    assert bad not in str(e.value) and "not shown" in str(e.value)


def test_serl_train_never_prints_the_key(tmp_path):
    """Through the CLI: a run that fails at once (no such model) prints neither the key nor,
    for a malformed one, the value; the run directory holds no trace of it."""
    run_dir = tmp_path / "run"
    for value in (SECRET, SECRET + "!"):
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "serl.cli",
                "train",
                "--use_wandb",
                value,
                "--model",
                str(tmp_path / "no_such_model"),
                "--run_dir",
                str(run_dir),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        assert r.returncode == 2, r.stderr
        assert SECRET not in r.stdout + r.stderr
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f
