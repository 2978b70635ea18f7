"""Reading benchmark files: the SeRL/Qwen-Math layout and MMLU-Pro.

Every problem of every requested benchmark is read and checked before any model
is loaded, so bad input stops the run with one message naming file, line and
field, and nothing is written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from serl.data.jsonl import jsonl_objects
from serl.rewards import normalize_label

# Fields that carry a per-row breakdown, in the order they are looked for.
LEVEL_FIELDS = ("level",)
SUBJECT_FIELDS = ("subject", "type", "Type", "subfield", "data_topic", "solution_type")
_LETTER = re.compile(r"^[A-J]$")


class DataError(ValueError):
    """Bad benchmark input; the message names file, line and field."""


@dataclass
class MathProblem:
    benchmark: str
    idx: int  # position in the file (0-based), stable across runs
    question: str
    gold: str  # bare reference answer (``\boxed{}`` / ``#### N`` removed)
    choice: bool = False  # multiple choice: the answer is a letter A-J
    level: str | None = None
    subject: str | None = None
    where: str = field(default="", compare=False)  # "FILE:LINE", for errors


@dataclass
class MMLUQuestion:
    question_id: int
    question: str
    options: list[str]
    answer: str  # letter A-J
    category: str
    cot_content: str = ""
    extra: dict = field(default_factory=dict)


def read_jsonl(path: Path) -> list[tuple[int, dict]]:
    """(line number, object) for each non-blank line; a bad line is a DataError."""
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    rows = list(jsonl_objects(path, DataError))
    if not rows:
        raise DataError(f"{path}: no rows")
    return rows


def _text_field(path, lineno, row, names) -> str:
    for name in names:
        value = row.get(name)
        if isinstance(value, str) and value.strip():
            return value
    raise DataError(f"{path}:{lineno}: missing field {' or '.join(repr(n) for n in names)} (a non-empty string)")


def _is_choice(row: dict, gold: str, question: str) -> bool:
    has_options = any(k in row for k in ("options", "choices")) or "Answer Choices" in question
    return bool(_LETTER.match(gold)) and has_options


def _first(row: dict, names) -> str | None:
    for name in names:
        value = row.get(name)
        if value is not None and value != "":
            return str(value)
    return None


def load_math_benchmark(data_dir: str | Path, name: str, limit: int | None = None) -> list[MathProblem]:
    """``<data_dir>/<name>/test.jsonl``: question in ``question`` or ``problem``,
    answer in ``answer`` as ``\\boxed{...}``, ``... #### N`` or plain text."""
    bench_dir = Path(data_dir) / name
    if not bench_dir.is_dir():
        raise DataError(f"{bench_dir}: benchmark directory not found")
    path = bench_dir / "test.jsonl"
    rows = read_jsonl(path)
    if limit is not None and limit > 0:
        rows = rows[:limit]
    problems = []
    for idx, (lineno, row) in enumerate(rows):
        question = _text_field(path, lineno, row, ("question", "problem"))
        raw = row.get("answer")
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            raw = str(raw)
        if not isinstance(raw, str) or not raw.strip():
            raise DataError(f"{path}:{lineno}: missing field 'answer' (a non-empty string)")
        gold = normalize_label(raw)
        if gold is None:
            raise DataError(f"{path}:{lineno}: field 'answer' holds no answer")
        problems.append(
            MathProblem(
                benchmark=name,
                idx=idx,
                question=question,
                gold=gold,
                choice=_is_choice(row, gold, question),
                level=_first(row, LEVEL_FIELDS),
                subject=_first(row, SUBJECT_FIELDS),
                where=f"{path}:{lineno}",
            )
        )
    return problems


def load_mmlu_pro(path: str | Path) -> list[MMLUQuestion]:
    """MMLU-Pro JSONL rows: question, options (list), answer (letter), category, cot_content."""
    path = Path(path)
    out = []
    for lineno, row in read_jsonl(path):
        question = _text_field(path, lineno, row, ("question",))
        category = _text_field(path, lineno, row, ("category",))
        options = row.get("options")
        if not isinstance(options, list) or not options or not all(isinstance(o, str) for o in options):
            raise DataError(f"{path}:{lineno}: field 'options' must be a non-empty list of strings")
        if len(options) > 10:
            raise DataError(f"{path}:{lineno}: field 'options' has {len(options)} items (at most 10, A-J)")
        answer = row.get("answer")
        if not isinstance(answer, str) or not _LETTER.match(answer.strip()):
            raise DataError(f"{path}:{lineno}: field 'answer' must be a letter A-J")
        answer = answer.strip()
        if ord(answer) - ord("A") >= len(options):
            raise DataError(f"{path}:{lineno}: field 'answer' {answer!r} is past the last option")
        cot = row.get("cot_content") or ""
        if not isinstance(cot, str):
            raise DataError(f"{path}:{lineno}: field 'cot_content' must be a string")
        qid = row.get("question_id")
        out.append(
            MMLUQuestion(
                question_id=qid if isinstance(qid, int) else lineno,
                question=question,
                options=options,
                answer=answer,
                category=category,
                cot_content=cot,
            )
        )
    return out
