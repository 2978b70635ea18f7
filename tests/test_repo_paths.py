"""No tracked file names one machine's location of the shared data: tests find it
relative to the repository (ROOT.parent / "shared" / "data") and skip when absent."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# an absolute path that ends in shared/data, e.g. "/srv/shared/data" (not "../shared/data")
ABSOLUTE_SHARED = re.compile(r"(?<![\w.])/[\w.-]+(?:/[\w.-]+)*/shared/data")
MACHINE_DIR = "/" + "work" + "/"  # this machine's workspace root


def _tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    files = []
    for name in out.splitlines():
        path = ROOT / name
        if path.suffix in {".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".txt", ".cfg"} or name == "Makefile":
            files.append(path)
    return files


@pytest.mark.parametrize(
    "text, bad",
    [
        ('DATA = Path("/srv/shared/data")', True),
        ("SEED = '/home/me/shared/data/seed.jsonl'", True),
        ('DATA = ROOT.parent / "shared" / "data"', False),
        ("--data_dir ../shared/data/serl_math_benchmarks", False),
    ],
)
def test_pattern(text, bad):
    assert bool(ABSOLUTE_SHARED.search(text)) is bad


def test_no_absolute_shared_data_paths():
    offenders = []
    for path in _tracked_text_files():
        if not path.exists() or path == Path(__file__).resolve():  # this file's examples
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if ABSOLUTE_SHARED.search(line) or MACHINE_DIR in line:
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert not offenders, "absolute paths to one machine's files:\n" + "\n".join(offenders)
