"""The files serl ships beside its code, and the one rule for finding them.

Three folders: ``dataset/`` (seed, held-out and SPELL corpus files), ``prompts/`` (the
self-instruction template) and ``configs/`` (example run configs, ``quickstart.yaml``).
In a checkout they sit at the repository's top level, where the docs name them
(``dataset/arith_seed.jsonl``). A wheel carries them inside this package instead
(``setup.py`` maps the three folders in at build time; git holds one copy), so an
installed serl runs without a checkout.

The rule: a relative path means relative to the current directory. Only when nothing is
there, and the path names a shipped file (``dataset/NAME``, ``prompts/NAME``,
``configs/NAME``), does it mean serl's own copy. So the defaults, and the names the docs
use, work from any directory, while a user's own ``dataset/`` folder still wins.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

KINDS = ("dataset", "prompts", "configs")
_CHECKOUT = Path(__file__).resolve().parents[2]  # the repository root, when this is a checkout


def shipped_dir(kind: str) -> Path:
    """The folder holding serl's own copy of ``kind`` (one of KINDS)."""
    if kind not in KINDS:
        raise ValueError(f"unknown shipped folder {kind!r}; known: {', '.join(KINDS)}")
    packaged = resources.files(__name__) / kind
    # An installed wheel is unpacked on disk, so its resources are plain paths that
    # datasets, open() and yaml can all read; only a zipped install would not be.
    if isinstance(packaged, Path) and packaged.is_dir():
        return packaged
    checkout = _CHECKOUT / kind
    # a checkout, installed editable or put on PYTHONPATH (never a site-packages neighbour)
    if checkout.is_dir() and (_CHECKOUT / "pyproject.toml").is_file():
        return checkout
    raise FileNotFoundError(
        f"serl's shipped {kind}/ folder is missing: not at {packaged} (an installed "
        f"wheel) nor at {checkout} (a checkout); reinstall serl"
    )


def locate(path: str | Path) -> Path:
    """``path`` as given, or, when it is not there and names a shipped file, serl's copy."""
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    if len(p.parts) == 2 and p.parts[0] in KINDS:
        try:
            own = shipped_dir(p.parts[0]) / p.parts[1]
        except FileNotFoundError:
            return p
        if own.exists():
            return own
    return p
