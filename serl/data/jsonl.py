"""JSON Lines input shared by every reader: one object per non-blank line, and an error
that names the file and line. Each caller passes its own error class (seed, corpus or
evaluation data) and checks its own keys."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator


def jsonl_objects(path: str | Path, error: type[Exception], text: str | None = None) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of ``text`` (read from ``path`` when
    None). Invalid JSON and non-objects raise ``error("PATH:LINE: ...")``."""
    if text is None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise error(f"{path}: not UTF-8 text ({e})") from None
    for no, line in enumerate(text.split("\n"), 1):  # not splitlines(): U+2028 and the like may sit in strings
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise error(f"{path}:{no}: not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(row, dict):
            raise error(f"{path}:{no}: expected a JSON object, got {type(row).__name__}")
        yield no, row
