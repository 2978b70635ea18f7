"""What every benchmark shares: where things are, what machine this is, the results file."""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
DATA = ROOT.parent / "shared" / "data"  # real data lives beside the repository, never in it
RESULTS = ROOT / "bench" / "results.jsonl"


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    return f"{cpu_model()}, {os.cpu_count()} cores"


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def load_avg() -> float:
    return round(os.getloadavg()[0], 2)


def spread(xs: list[float]) -> dict:
    """Median, min, max and the spread (max - min) / median of repeated timings."""
    med = statistics.median(xs)
    return {"median": round(med, 4), "min": round(min(xs), 4), "max": round(max(xs), 4),
            "spread": round((max(xs) - min(xs)) / med, 3) if med else 0.0, "runs": [round(x, 4) for x in xs]}


def append_result(record: dict, out: str | os.PathLike = RESULTS) -> None:
    """One JSON line per run, stamped with the bench-independent facts."""
    stamped = {"bench": record.pop("bench"), "date": now(), "machine": machine(),
               "load_avg_1m_at_end": load_avg(), "python": platform.python_version(), **record}
    with open(out, "a") as f:
        f.write(json.dumps(stamped) + "\n")
    print(f"appended to {out}")


def smollm2_path() -> str:
    """SmolLM2-135M-Instruct as an HF folder (converted once from the pip package's GGUF)."""
    from serl.models.resolve import resolve_model

    return resolve_model("smollm2")


def math_prompts(n: int, data: Path = DATA) -> list[str]:
    """The first ``n`` SeRL seed problems (MATH train sample), as plain question text."""
    path = data / "serl_seed" / "train_with_idx_sample_500.jsonl"
    if not path.exists():
        raise SystemExit(f"{path}: not found (the benchmarks read ../shared/data beside the repo)")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r["problem"] for r in rows[:n]]
