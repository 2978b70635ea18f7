"""Candidate training tasks for issue 31, read from ../shared/data at run time (never copied
into the repository). Each task has a training pool (seeds and the probe come from it) and a
held-out pool (only evaluated).

- gsm8k_2step: GSM8K problems whose reference solution makes exactly two calculator calls
  (``<<a*b=c>>``); training pool from train.jsonl, held-out from test.jsonl.
- gsm8k_le2: the same with one or two calls.
- gsm8k_3step: exactly three calls.
- gsm8k_1step, gsm8k_4step, and the unions gsm8k_1to3, gsm8k_2to3, gsm8k_2to4, gsm8k_3to4 (the
  fifth round, issue 62: one step count alone has at most 364 test problems, and the round
  needs 600 held out).
- arith: the shipped arithmetic seeds (dataset/arith_seed.jsonl) for training; held out, 1,000
  problems the arithmetic generator draws under its own seed, disjoint from every shipped file
  (``arith_heldout``: generated at run time, as the shipped files are).
"""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"
GSM8K = DATA / "gsm8k"
SVAMP = DATA / "serl_math_benchmarks" / "svamp" / "test.jsonl"


def _steps(lo: int, hi: int):
    return lambda answer: lo <= answer.count("<<") <= hi


TASKS = {"gsm8k_2step": _steps(2, 2), "gsm8k_le2": _steps(1, 2), "gsm8k_3step": _steps(3, 3),
         "gsm8k_1step": _steps(1, 1), "gsm8k_4step": _steps(4, 4), "gsm8k_1to3": _steps(1, 3),
         "gsm8k_2to3": _steps(2, 3), "gsm8k_2to4": _steps(2, 4), "gsm8k_3to4": _steps(3, 4), "arith": None}
ARITH_HELDOUT_SEED, ARITH_HELDOUT_N = 2028, 1000


def _gsm8k(split: str, task: str) -> list[dict]:
    from serl.data.seeds import gsm8k_final_answer

    path = GSM8K / f"{split}.jsonl"
    if not path.is_file():
        raise SystemExit(f"{path}: not found (the experiment reads GSM8K from ../shared/data/gsm8k)")
    keep = TASKS[task]
    rows = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            r = json.loads(line)
            if keep(r["answer"]):
                rows.append({"question": r["question"], "label": gsm8k_final_answer(r["answer"]),
                             "where": f"{path}:{i}"})
    return rows


def _arith(rows: list[dict], where: str) -> list[dict]:
    return [{"question": r["problem"], "label": r["answer"], "where": f"{where}:{i}"} for i, r in enumerate(rows, 1)]


def arith_heldout() -> list[dict]:
    """The arithmetic task's held-out rows: disjoint from every shipped arithmetic file."""
    from serl.data.arith import efficacy_heldout, guard_probe, make_problems, shipped_problems, spin_splits

    train, held = spin_splits()
    taken = shipped_problems() | {r["problem"] for r in train + held + efficacy_heldout() + guard_probe()}
    return make_problems(ARITH_HELDOUT_N, ARITH_HELDOUT_SEED, exclude=taken)


def training_pool(task: str) -> list[dict]:
    if task == "arith":
        path = ROOT / "dataset" / "arith_seed.jsonl"
        return _arith([json.loads(x) for x in path.read_text().splitlines() if x.strip()], "dataset/arith_seed.jsonl")
    return _gsm8k("train", task)


def heldout_pool(task: str) -> list[dict]:
    if task == "arith":
        return _arith(arith_heldout(), f"serl.data.arith(seed {ARITH_HELDOUT_SEED})")
    return _gsm8k("test", task)


def svamp() -> list[dict]:
    """SVAMP (SeRL's copy), the transfer benchmark: nothing is trained or tuned on it."""
    from serl.eval.data import load_math_benchmark

    return [{"question": p.question, "label": p.gold, "where": p.where}
            for p in load_math_benchmark(SVAMP.parent.parent, "svamp")]


def write_task_files(task: str, out: Path, seeds: int, heldout: int, transfer: int, seed: int = 2026) -> dict:
    """out/data/{seeds,heldout,transfer}.jsonl (``problem``, ``answer``, ``source``): seeded
    samples of the task's training pool, its held-out pool and SVAMP. The same arguments
    always give the same files; a resume that would write different ones stops."""
    import hashlib
    import random

    rng = random.Random(seed)
    parts = {"seeds": rng.sample(training_pool(task), seeds), "heldout": rng.sample(heldout_pool(task), heldout),
             "transfer": rng.sample(svamp(), transfer)}
    held = {" ".join(r["question"].lower().split()) for r in parts["heldout"] + parts["transfer"]}
    clash = [r["where"] for r in parts["seeds"] if " ".join(r["question"].lower().split()) in held]
    if clash:
        raise SystemExit(f"seed problems also in an evaluation set: {clash[:3]}")
    d = out / "data"
    d.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, rows in parts.items():
        text = "".join(json.dumps({"problem": r["question"], "answer": r["label"], "source": r["where"]
                                   .replace(str(ROOT.parent), "..")}) + "\n" for r in rows)
        path = d / f"{name}.jsonl"
        if path.exists() and path.read_text() != text:
            raise SystemExit(f"{path}: differs from what these settings write (sha256 "
                             f"{hashlib.sha256(path.read_bytes()).hexdigest()[:12]}); use another --out")
        path.write_text(text)
        paths[name] = path
    return paths
