"""Seed problems: read JSONL/Parquet files and Hugging Face datasets with configurable keys.

Every failure names the file, and the line and key where there is one, so that a
user with 500 seed rows can fix the one that is wrong.

Sources (``read_seeds``): a ``.jsonl``/``.json`` (JSON Lines) or ``.parquet`` file is read
here, with exact line numbers; CSV/Arrow files, ``.json`` files holding one JSON array,
dataset folders (``save_to_disk`` or a folder of data files) and hub ids go through
``serl.data.hf``.

Human answers (``output_key``, for SFT and SPIN) are read into ``Problem.solution``. A
GSM8K-style answer, a worked solution whose last line is ``#### 42``, becomes the same
solution ending in ``\\boxed{42}``, the answer format serl's rewards extract, and its
``<<48/2=24>>`` calculator annotations are dropped (GSM8K's own format, see
``gsm8k_to_boxed``). A label in that format is cut to the final answer.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from serl import DataError
from serl.data.jsonl import jsonl_objects
from serl.shipped import locate


@dataclass
class Problem:
    text: str
    label: str | None = None
    meta: dict = field(default_factory=dict)
    solution: str | None = None  # human-written answer (worked solution), from output_key
    where: str = field(default="", compare=False)  # "FILE:LINE" (or row) it was read from, for errors


_GSM8K_FINAL = re.compile(r"(?:^|\n)[ \t]*####[ \t]*([^\n]*?)\s*\Z")  # the last line only
_GSM8K_CALC = re.compile(r"<<[^<>\n]*>>")


def gsm8k_final_answer(text: str) -> str | None:
    """What follows GSM8K's final ``####`` marker line, or None when there is none."""
    m = _GSM8K_FINAL.search(text)
    return m.group(1).strip() if m else None


def gsm8k_to_boxed(text: str) -> str:
    """``"...\\n#### 42"`` -> ``"...\\n\\boxed{42}"``, without calculator annotations.

    Text without a final ``####`` line is returned unchanged. The annotations
    (``48/2 = <<48/2=24>>24``) are GSM8K's calculator calls, not prose; a model
    fine-tuned on them would learn to write them.
    """
    m = _GSM8K_FINAL.search(text)
    if not m:
        return text
    body = _GSM8K_CALC.sub("", text[: m.start()]).rstrip()
    boxed = f"\\boxed{{{m.group(1).strip()}}}"
    return f"{body}\n{boxed}" if body else boxed


def chat_prompt_text(value, where: str, key: str):
    """verl's layout: a prompt column holding chat messages ``[{"role", "content"}, ...]`` is
    read as its last user message (the chat template is applied later, as for plain text;
    a system message in the row is not used: ``--system_prompt`` sets the instruction)."""
    if not isinstance(value, (list, tuple)):
        return value
    users = [m.get("content") for m in value if isinstance(m, dict) and m.get("role") == "user"]
    if not users or not isinstance(users[-1], str):
        raise DataError(f"{where}: key '{key}' is a list but holds no chat message with role 'user' and text content")
    return users[-1]


def _nested(row: dict, key: str):
    """``row[key]``, or for a dotted key absent as such (verl's ``reward_model.ground_truth``)
    the value down the nested mappings; None when missing."""
    if key in row:
        return row[key]
    value = row
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


DEFAULT_LABEL_KEY = "answer"  # --label_key's default
VERL_LABEL_KEY = "reward_model.ground_truth"


def _row_to_problem(row, where: str, input_key: str, label_key: str | None, output_key: str | None = None) -> Problem:
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
    keys = ", ".join(sorted(map(str, row))[:8])
    if input_key not in row:
        raise DataError(f"{where}: missing key '{input_key}' (keys present: {keys}); set --input_key")
    text = chat_prompt_text(row[input_key], where, input_key)
    if not isinstance(text, str) or not text.strip():
        raise DataError(f"{where}: key '{input_key}' must be a non-empty string")
    label = None
    raw = _nested(row, label_key) if label_key else None
    if raw is None and label_key == DEFAULT_LABEL_KEY:  # verl's rows keep the label here (SPIN's recipe)
        raw = _nested(row, VERL_LABEL_KEY)
    if raw is not None:
        if isinstance(raw, (bool, list, dict)):  # str() would make text no answer can ever match
            kind = {bool: "true/false", list: "a list", dict: "an object"}[type(raw)]
            shown = json.dumps(raw, ensure_ascii=False)
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise DataError(
                f"{where}: key '{label_key}' is {kind} ({shown}); a label must be a string or a "
                f"number. Fix the row, or pass --label_key '' if this key is not a label"
            )
        if isinstance(raw, float) and not math.isfinite(raw):  # JSON NaN, or Parquet's missing value
            raise DataError(
                f"{where}: key '{label_key}' is {raw!r}, not a label; give a finite number or a "
                f"string, or drop the key from rows that have no label"
            )
        label = str(raw)
        final = gsm8k_final_answer(label)
        label = final if final else label
    solution = None
    if output_key:
        if output_key not in row:
            raise DataError(f"{where}: missing key '{output_key}' (keys present: {keys}); set --output_key")
        value = row[output_key]
        if isinstance(value, float) and not math.isfinite(value):
            raise DataError(f"{where}: key '{output_key}' is {value!r}; every row needs a non-empty answer")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str) or not value.strip():
            raise DataError(f"{where}: key '{output_key}' is empty; every row needs a non-empty answer")
        if gsm8k_final_answer(value) == "":
            raise DataError(f"{where}: key '{output_key}' ends in '####' with no answer")
        solution = gsm8k_to_boxed(value.strip())
    meta = {
        k: v
        for k, v in row.items()
        if k not in (input_key, label_key, output_key) and isinstance(v, (str, int, float, bool))
    }
    return Problem(text=text.strip(), label=label, meta=meta, solution=solution, where=where)


def read_seeds(
    path: str | Path,
    input_key: str = "problem",
    label_key: str | None = "answer",
    limit: int | None = None,
    *,
    output_key: str | None = None,
    split: str = "train",
) -> list[Problem]:
    """Read problems from a file, dataset folder or hub id (see the module doc).

    ``label_key`` may be absent from rows (labels are optional for self-play);
    ``input_key`` must be present in every row, and so must ``output_key`` when
    given, with a non-empty answer. ``limit`` keeps the first rows (``--max_samples``);
    ``split`` names the split of a dataset folder or hub id (``--prompt_split``). A
    single JSONL/Parquet/CSV file has one split, ``train``.
    """
    p = locate(path)
    odd = _not_a_data_path(p)
    if odd:
        raise DataError(f"{p}: {odd}")
    suffix = p.suffix.lower()
    if p.is_file() and suffix in (".jsonl", ".json", ".parquet") and not _json_array(p):
        if split != "train":
            raise DataError(f"{p}: a single file has one split, 'train', not '{split}'")
        problems = (
            _read_parquet(p, input_key, label_key, output_key)
            if suffix == ".parquet"
            else _read_jsonl(p, input_key, label_key, output_key, limit)
        )
    elif not p.exists() and suffix in (".jsonl", ".json", ".parquet"):
        raise DataError(f"seed file not found: {p}")
    else:
        from serl.data.hf import read_hf_rows

        rows = read_hf_rows(path, split, limit, required=(input_key, output_key or ""))
        problems = [
            _row_to_problem(row, f"{path} (split '{split}'): row {i}", input_key, label_key, output_key)
            for i, row in enumerate(rows)
        ]
    if not problems:
        raise DataError(f"{p}: no seed problems in file")
    return problems[:limit] if limit else problems


def _not_a_data_path(p: Path) -> str | None:
    """What makes an existing path unusable as data (a symlink loop, a device), or None.
    Path.exists() is False for both, so they were reported as "not found"."""
    try:
        st = os.stat(p)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "a symbolic link that loops (it leads back to itself); point --prompt_data at the file"
        return None  # absent: a hub id, or the callers' own "not found"
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return None
    return (
        "not a regular file or folder (a device, pipe or socket); give a JSONL, JSON, Parquet file or a dataset folder"
    )


def _json_array(p: Path) -> bool:
    """A ``.json`` file holding one JSON array (not JSON Lines): datasets reads it."""
    if p.suffix.lower() != ".json":
        return False
    with open(p, "rb") as f:
        return f.read(4096).lstrip()[:1] == b"["


def _read_parquet(p: Path, input_key, label_key, output_key) -> list[Problem]:
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise DataError(f"{p}: reading Parquet needs pyarrow (pip install pyarrow)") from e
    try:
        rows = pq.read_table(p).to_pylist()
    except Exception as e:
        raise DataError(f"{p}: not a readable Parquet file ({e})") from e
    return [_row_to_problem(row, f"{p}: row {i}", input_key, label_key, output_key) for i, row in enumerate(rows)]


def _read_jsonl(p: Path, input_key, label_key, output_key, limit) -> list[Problem]:
    problems: list[Problem] = []
    for no, row in jsonl_objects(p, DataError):
        problems.append(_row_to_problem(row, f"{p}:{no}", input_key, label_key, output_key))
        if limit and len(problems) >= limit:
            break
    return problems
