"""JSON Lines input shared by every reader: one object per non-blank line, and an error
that names the file and line. Each caller passes its own error class (seed, corpus or
evaluation data) and checks its own keys."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path


def read_utf8(path: str | Path, error: type[Exception]) -> str:
    """The file's text; bytes that are not UTF-8 raise ``error("PATH:LINE: ...")``."""
    raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise error(
            f"{path}:{line}: not UTF-8 text (byte 0x{raw[e.start]:02x} at byte {col} of the line; "
            f"save the file as UTF-8)"
        ) from None


def jsonl_objects(path: str | Path, error: type[Exception], text: str | None = None) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of ``text`` (read from ``path`` when
    None). Invalid JSON and non-objects raise ``error("PATH:LINE: ...")``."""
    if text is None:
        text = read_utf8(path, error)
    for no, line in enumerate(text.split("\n"), 1):  # not splitlines(): U+2028 and the like may sit in strings
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise error(f"{path}:{no}: not valid JSON ({e.msg} at column {e.colno})") from None
        except RecursionError:  # the decoder recurses once per level of [ or {
            raise error(f"{path}:{no}: JSON nested too deeply to read") from None
        except ValueError as e:  # valid JSON Python refuses, e.g. an integer of over 4300 digits
            raise error(f"{path}:{no}: JSON that cannot be read ({str(e)[:120]})") from None
        if not isinstance(row, dict):
            raise error(f"{path}:{no}: expected a JSON object, got {type(row).__name__}")
        yield no, row


def keyed_rows(path: str, keys: tuple[str, ...], limit: int = 0) -> list[dict]:
    """JSON objects of a JSONL file (a shipped name or a path) whose ``keys`` are non-empty
    strings (or numbers), each with its ``line``; errors name file, line and key."""
    from serl import DataError
    from serl.shipped import locate

    p = locate(path)
    if not p.is_file():
        raise DataError(f"{p}: file not found")
    rows = []
    for no, row in jsonl_objects(p, DataError):
        for k in keys:
            v = row.get(k)
            if not isinstance(v, (str, int)) or isinstance(v, bool) or str(v).strip() == "":
                raise DataError(f"{p}:{no}: key '{k}' missing or not a non-empty string")
        rows.append({**row, "line": no})
        if limit and len(rows) >= limit:
            break
    if not rows:
        raise DataError(f"{p}: no rows")
    return rows
