"""README.md's tutorial commands, run as a fresh clone runs them: a `git clone`, its `.venv` (what
scripts/install.sh makes; here a link to this one), the environment activated as the README says,
nothing else on PATH. Every command reaches serl; the first SeRL command trains, cut to one tiny step."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
# the command's own flags, then these (later flags win): one tiny SeRL step, as tests/conftest.py's TINY_TRAIN
TINY = [
    "--steps",
    "1",
    "--generator",
    "hf",
    "--rollout_batch_size",
    "2",
    "--n_samples_per_prompt",
    "2",
    "--generate_max_len",
    "16",
    "--instructions_num_per_iteration",
    "2",
    "--few_shot_generation",
    "4",
    "--few_shot_generation_batch_size",
    "2",
    "--instruction_max_len",
    "64",
    "--instruction_max_attempts",
    "2",
    "--max_refill_rounds",
    "1",
    "--reward_difficulty_bounds",
    "0",
    "1",
    "--progress",
    "quiet",
    "--report",
    "false",
    "--save_model",
    "false",
]


def readme_commands() -> list[str]:
    """The `serl ...` lines of README.md's bash blocks, continuation lines joined, comments cut."""
    text = (ROOT / "README.md").read_text()
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("serl "):
                out.append(line)
    return out


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    if shutil.which("git") is None or not (ROOT / ".venv" / "bin" / "activate").is_file():
        pytest.skip("needs git and the project's .venv")
    base = tmp_path_factory.mktemp("fresh")
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(base / "repo")], check=True)
    (base / "repo" / ".venv").symlink_to((ROOT / ".venv").resolve())
    if (ROOT.parent / "shared").exists():  # the README's ../shared/data beside the clone
        (base / "shared").symlink_to((ROOT.parent / "shared").resolve())
    return base / "repo"


def activation() -> str:
    """What README.md tells a fresh clone to run so that `serl` is a command."""
    found = re.search(r"`(\. \.venv/bin/activate)`", (ROOT / "README.md").read_text())
    assert found, "README.md does not say how a fresh clone gets `serl` on PATH"
    return found.group(1)


def _run(clone: Path, command: str, *extra: str) -> subprocess.CompletedProcess:
    # the clone's code, not the one the shared environment's editable install points at
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "PYTHONPATH": str(clone),
        "WANDB_MODE": "offline",
        "TOKENIZERS_PARALLELISM": "false",
    }
    script = f"{activation()} && {command} {' '.join(extra)}"
    return subprocess.run(["bash", "-c", script], cwd=clone, env=env, capture_output=True, text=True, timeout=1800)


def test_the_readme_has_tutorial_commands_and_says_how_to_run_them():
    assert activation() == ". .venv/bin/activate"
    cmds = readme_commands()
    assert any(c.startswith("serl train --pretrain") for c in cmds) and any(c.startswith("serl eval") for c in cmds)


def test_every_readme_command_reaches_serl_in_a_fresh_clone(clone):
    for command in readme_commands():
        r = _run(clone, command, "--help")
        assert r.returncode == 0, f"{command}\n{r.stderr[-2000:]}"
        assert "command not found" not in r.stderr and "No module named" not in r.stderr


def test_the_first_serl_command_trains_in_a_fresh_clone(clone):
    command = next(c for c in readme_commands() if c.startswith("serl train --pretrain"))
    r = _run(clone, command, *TINY)
    assert r.returncode == 0, f"{command}\n{r.stderr[-3000:]}"
    save = re.search(r"--save_path (\S+)", command).group(1)
    assert (clone / save / "metrics.jsonl").read_text().count("\n") == 1
