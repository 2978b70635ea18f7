"""scripts/train/train_spell.sh: `serl train` accepts it as written, under bash and zsh."""

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
TEMPLATE = ROOT / "scripts" / "train" / "train_spell.sh"
SHELLS = [s for s in ("bash", "zsh") if shutil.which(s)]


def static_argv() -> list[str]:
    """The template's `serl train` words, continuation lines joined and defaults expanded."""
    text = TEMPLATE.read_text()
    env: dict[str, str] = {}
    for name, default in re.findall(r'^(\w+)="\$\{\1:-(.*)\}"', text, flags=re.M):
        env[name] = re.sub(r"\$(\w+)", lambda m: env[m.group(1)], default)
    body = text[text.index("serl train \\") :].split("\n")
    lines = []
    for line in body:
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


def test_template_parses_with_spell_settings():
    cfg, _ = parse_args(static_argv())
    assert cfg.recipe == "spell" and cfg.corpus == "dataset/docs_train.jsonl"
    assert (cfg.n_samples_per_prompt, cfg.grounding_threshold, cfg.verifier_band, cfg.memory_capacity) == (
        8,
        0.1,
        [0.51, 0.99],
        3,
    )
    assert cfg.advantage_estimator == "group_norm" and not cfg.compact_prompts
    assert cfg.ray and cfg.learner == "deepspeed" and cfg.generator == "vllm"


@pytest.mark.parametrize("shell", SHELLS)
def test_template_runs_the_same_argv(shell, tmp_path):
    out = tmp_path / "argv.json"
    fake = tmp_path / "bin" / "serl"
    fake.parent.mkdir()
    fake.write_text(f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(out)!r}, 'w'))\n")
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(GPUS="8", PATH=f"{fake.parent}{os.pathsep}{env['PATH']}", CORPUS="/my docs/man pages")
    assert subprocess.run([shell, "-n", str(TEMPLATE)]).returncode == 0
    r = subprocess.run([shell, str(TEMPLATE)], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    argv = json.loads(out.read_text())
    expected = static_argv()
    expected[expected.index("--corpus") + 1] = "/my docs/man pages"  # spaces survive quoting
    assert argv == ["train", *expected]
