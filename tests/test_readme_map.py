"""The README's architecture map stays true to the code: it names every module under serl/ and
no module that is gone (a split or a rename updates the map in the same change)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def architecture() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text[text.index("## Architecture") : text.index("## Writing a recipe")]


def unnamed(section: str, package: Path) -> list[str]:
    return sorted(
        str(f.relative_to(package.parent))
        for f in package.rglob("*.py")
        if f.name != "__init__.py" and f.name not in section
    )


def test_the_map_names_every_module():
    assert unnamed(architecture(), ROOT / "serl") == []


def test_the_map_names_no_module_that_is_gone():
    tops = [d for d in ROOT.iterdir() if d.is_dir() and not d.name.startswith(".") and d.name != "runs"]
    names = {f.name for d in tops for f in d.rglob("*.py")} | {f.name for f in ROOT.glob("*.py")}
    gone = sorted({m for m in re.findall(r"\b([a-z_][a-z0-9_]*\.py)\b", architecture()) if m not in names})
    assert gone == []


def test_the_check_sees_an_unnamed_module(tmp_path):
    pkg = tmp_path / "serl"
    (pkg / "run").mkdir(parents=True)
    for name in ("__init__.py", "run/loop.py", "run/new_part.py"):
        (pkg / name).write_text("")
    assert unnamed("run/  loop.py (the steps)", pkg) == ["serl/run/new_part.py"]
