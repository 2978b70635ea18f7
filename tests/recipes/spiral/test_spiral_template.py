"""scripts/train/train_spiral.sh: `serl train` accepts it as written, under bash and zsh."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from serl.config.parser import parse_args

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = ROOT / "scripts" / "train" / "train_spiral.sh"
SHELLS = [s for s in ("bash", "zsh") if shutil.which(s)]


def static_argv() -> list[str]:
    """The `serl train` words of the template, continuation lines joined, defaults expanded."""
    text = TEMPLATE.read_text()
    env: dict[str, str] = {}
    for name, default in re.findall(r'^(\w+)="\$\{\1:-(.*)\}"', text, flags=re.M):
        env[name] = re.sub(r"\$(\w+)", lambda m: env[m.group(1)], default)
    lines = []
    for line in text[text.index("serl train \\") :].splitlines():
        lines.append(line.rstrip("\\").strip())
        if not line.rstrip().endswith("\\"):
            break
    words = [
        re.sub(r"\$(\w+)", lambda m: env[m.group(1)], w)
        for w in shlex.split(" ".join(lines))
        if w not in ("${FIT[@]}", "$@")
    ]  # the machine's fit and the user's extra arguments (scripts/train)
    assert words[:2] == ["serl", "train"]
    return words[2:]


def test_template_parses_with_upstream_settings():
    cfg, _ = parse_args(static_argv())
    assert cfg.recipe == "spiral" and cfg.game_list() == ["kuhn_poker"] and cfg.opponent == "self"
    assert (cfg.ppo_epochs, cfg.init_kl_coef, cfg.actor_learning_rate, cfg.generate_max_len) == (2, 0.0, 1e-6, 4096)
    assert (cfg.rae, cfg.rae_alpha, cfg.filter_zero_adv, cfg.mask_truncated) == (True, 0.95, True, True)
    assert (cfg.invalid_penalty, cfg.invalid_opponent_reward) == (-1.5, 0.5)
    assert (cfg.lr_warmup_ratio, cfg.min_lr_ratio) == (0.0, 1.0)  # a constant learning rate
    assert cfg.ray and cfg.learner == "deepspeed" and cfg.generator == "vllm"


@pytest.mark.parametrize("shell", SHELLS)
def test_template_runs_the_same_argv(shell, tmp_path):
    r = subprocess.run([shell, "-n", str(TEMPLATE)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "argv.json"
    fake = tmp_path / "bin" / "serl"
    fake.parent.mkdir()
    fake.write_text(f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(out)!r}, 'w'))\n")
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(
        GPUS="8",
        PATH=f"{fake.parent}{os.pathsep}{env['PATH']}",
        PRETRAIN="/models/My Model",
        SAVE_PATH=str(tmp_path / "run"),
    )
    r = subprocess.run([shell, str(TEMPLATE)], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    argv = json.loads(out.read_text())
    expected = static_argv()
    expected[expected.index("--pretrain") + 1] = "/models/My Model"  # spaces survive quoting
    expected[expected.index("--save_path") + 1] = str(tmp_path / "run")
    assert argv == ["train", *expected]
