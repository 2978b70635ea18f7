"""Seed problems: read JSONL/Parquet files with configurable keys.

Every failure names the file, and the line and key where there is one, so that a
user with 500 seed rows can fix the one that is wrong.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


class DataError(ValueError):
    """Bad seed or benchmark data; the message names file, line and key."""


@dataclass
class Problem:
    text: str
    label: str | None = None
    meta: dict = field(default_factory=dict)


def _row_to_problem(row, where: str, input_key: str, label_key: str | None) -> Problem:
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
    if input_key not in row:
        keys = ", ".join(sorted(map(str, row))[:8])
        raise DataError(f"{where}: missing key '{input_key}' (keys present: {keys}); "
                        f"set --input_key")
    text = row[input_key]
    if not isinstance(text, str) or not text.strip():
        raise DataError(f"{where}: key '{input_key}' must be a non-empty string")
    label = None
    if label_key and row.get(label_key) is not None:
        label = str(row[label_key])
    meta = {k: v for k, v in row.items() if k not in (input_key, label_key)
            and isinstance(v, (str, int, float, bool))}
    return Problem(text=text.strip(), label=label, meta=meta)


def read_seeds(path: str | Path, input_key: str = "problem", label_key: str | None = "answer",
               limit: int | None = None) -> list[Problem]:
    """Read problems from a ``.jsonl``/``.json`` or ``.parquet`` file.

    ``label_key`` may be absent from rows (labels are optional for self-play);
    ``input_key`` must be present in every row.
    """
    p = Path(path)
    if not p.is_file():
        raise DataError(f"seed file not found: {p}")
    problems: list[Problem] = []
    if p.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as e:
            raise DataError(f"{p}: reading Parquet needs pyarrow (pip install pyarrow)") from e
        try:
            rows = pq.read_table(p).to_pylist()
        except Exception as e:
            raise DataError(f"{p}: not a readable Parquet file ({e})") from e
        for i, row in enumerate(rows):
            problems.append(_row_to_problem(row, f"{p}: row {i}", input_key, label_key))
    else:
        try:
            lines = p.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as e:
            raise DataError(f"{p}: not UTF-8 text ({e})") from e
        for no, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{p}:{no}: not valid JSON ({e.msg} at column {e.colno})") from e
            problems.append(_row_to_problem(row, f"{p}:{no}", input_key, label_key))
            if limit and len(problems) >= limit:
                break
    if not problems:
        raise DataError(f"{p}: no seed problems in file")
    return problems[:limit] if limit else problems
