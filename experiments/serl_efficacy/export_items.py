"""Keep an experiment's per-problem results in the repository, without any problem text (and
without the response texts, unless ``texts``: the fifth round keeps them).

    python experiments/serl_efficacy/export_items.py runs/serl_efficacy_qwen2.5-coder-0.5b_gsm8k_2step \
        experiments/serl_efficacy/items/gsm8k_2step

Run directories live on the machine that ran them and are lost with it (the third round lost
arms a and b's this way). The paired statistics need only, per problem and evaluation, whether
the answer was right, cut, boxed and how long it was: those 0/1 vectors and counts are small,
carry no data-set text (the problems stay in ../shared/data), and are written here as one JSON
per evaluation, in the --out directory's own layout (eval/<tag>.json, setup.json,
timings.json, arm_<x>/metrics.jsonl), so `results_task.py DEST` rebuilds the tables and curves
from the repository alone. Problem i of an evaluation is line i of the data file that
`tasks.py` writes (seeded, from ../shared/data).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

KEEP = ("tag", "model", "step", "n", "k", "tokens", "truncated", "boxed", "correct_boxed", "correct_number",
        "maj_boxed", "maj_number", "sample_boxed", "sample_tokens", "times")


def compact(res: dict, texts: bool = False) -> dict:
    out = {k: res[k] for k in (*KEEP, *(("texts",) if texts else ())) if k in res}
    out["model"] = Path(str(out.get("model", ""))).name  # a path on the machine that ran it says nothing here
    return out


def export(run_out: Path, dest: Path, texts: bool = False) -> list[Path]:
    """``texts``: keep the response texts too (the fifth round: issue 62 asks for them)."""
    src = run_out / "eval"
    if not src.is_dir():
        raise SystemExit(f"{src}: no eval/ folder (is {run_out} an experiment --out directory?)")
    (dest / "eval").mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(src.glob("*.json")):
        target = dest / "eval" / path.name
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(compact(json.loads(path.read_text()), texts), separators=(",", ":")) + "\n")
        tmp.replace(target)
        written.append(target)
    for name in ("setup.json", "timings.json"):
        if (run_out / name).exists():
            (dest / name).write_text((run_out / name).read_text())
    for metrics in sorted(run_out.glob("arm_*/metrics.jsonl")):  # numbers only: the curves' training panels
        (dest / metrics.parent.name).mkdir(exist_ok=True)
        (dest / metrics.parent.name / "metrics.jsonl").write_text(metrics.read_text())
    return written


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    for p in export(Path(sys.argv[1]), Path(sys.argv[2])):
        print(p)
