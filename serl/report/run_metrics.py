"""Reading a run's metrics.jsonl back: one series per metric key, by step.

Shared by the report (plots, summary.md) and the end-of-run summary (serl.report.summary), so
neither imports the other.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from serl.report.metrics import META_KEYS


class ReportError(Exception):
    """Bad input for the report; the message names the file (and line) at fault."""


@dataclass
class Series:
    steps: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)  # NaN where the logger wrote null

    def finite(self) -> tuple[list[int], list[float]]:
        pairs = [(s, v) for s, v in zip(self.steps, self.values) if math.isfinite(v)]
        return [s for s, _ in pairs], [v for _, v in pairs]


def read_metrics(path: Path) -> tuple[dict[str, Series], dict[int, float], list[str]]:
    """Parse a metrics.jsonl file; lines of the same step are merged (later wins)."""
    if not path.is_file():
        raise ReportError(f"{path}: metrics file not found (is this a serl run directory?)")
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    torn_tail = text != "" and not text.endswith("\n")
    rows: dict[int, dict[str, float]] = {}
    wall: dict[int, float] = {}
    notes: list[str] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if torn_tail and number == len(lines):
                # A crash mid-write leaves exactly this: a last line without its newline.
                notes.append(f"{where}: incomplete last line ignored (the run stopped while writing it)")
                break
            raise ReportError(f"{where}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise ReportError(f"{where}: expected a JSON object, got {type(record).__name__}")
        step = record.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            raise ReportError(f"{where}: field 'step' missing or not an integer")
        row = rows.setdefault(step, {})
        for key, value in record.items():
            if key == "wall_time":
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    wall[step] = float(value)
                continue
            if key in META_KEYS:
                continue
            if value is None:
                row[key] = math.nan
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                row[key] = float(value)
            else:
                raise ReportError(f"{where}: field {key!r} is not a number or null: {value!r}")
    series: dict[str, Series] = {}
    for step in sorted(rows):
        for key, value in rows[step].items():
            s = series.setdefault(key, Series())
            s.steps.append(step)
            s.values.append(value)
    return series, wall, notes
