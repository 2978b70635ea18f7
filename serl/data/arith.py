"""A deterministic generator of grade-school arithmetic word problems with exact answers.

This is the data that ships with serl (``dataset/``), written by us so that the
quickstart and the SPIN recipe need no downloaded data. Problems are short and easy on
purpose: a 135M model must agree with itself often enough for majority voting to
give a learning signal. Every row has ``problem``, ``answer`` (the exact integer),
``kind`` (the template) and ``solution``: a short worked solution in plain steps that
ends in ``\\boxed{answer}``, the human answer for SFT and SPIN (``--output_key solution``).

Files (regenerate all with ``python -m serl.data.arith [FOLDER]``; each is fixed by its seed):

- ``arith_seed.jsonl``: 200 SeRL seed problems (seed 1234).
- ``arith_heldout.jsonl``: 64 held-out problems (seed 999), none in the seed file.
- ``arith_spin_train.jsonl``: 256 SPIN training problems (seed 2024).
- ``arith_spin_heldout.jsonl``: 256 SPIN held-out problems (seed 2025).
- ``arith_efficacy_heldout.jsonl``: 256 held-out problems of ``experiments/serl_efficacy``
  (seed 2026).
- ``arith_guard_probe.jsonl``: 512 training-side problems for the collapse guard's probe
  (``--guard_probe_data``; seed 2027): a run trains on none of them and evaluates on none.

The six files share no problem text. The solutions were added after the first two
files shipped; drawing them takes no random numbers, so those files kept their
problems, answers and order.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

NAMES = [
    "Ana",
    "Ben",
    "Chen",
    "Dara",
    "Eli",
    "Fatima",
    "Goran",
    "Hana",
    "Ivo",
    "Jia",
    "Kofi",
    "Lena",
    "Mateo",
    "Nia",
    "Omar",
    "Priya",
    "Quinn",
    "Rosa",
    "Sami",
    "Tomas",
]
ITEMS = [
    "apples",
    "pencils",
    "marbles",
    "stickers",
    "books",
    "cookies",
    "stamps",
    "shells",
    "cards",
    "balloons",
    "oranges",
    "coins",
]


def _add(r):
    a, b, n, it = r.randint(2, 40), r.randint(2, 40), r.choice(NAMES), r.choice(ITEMS)
    return (
        f"{n} has {a} {it}. A friend gives {n} {b} more {it}. How many {it} does {n} have now?",
        a + b,
        f"{n} starts with {a} {it} and gets {b} more: {a} + {b} = {a + b}.",
    )


def _sub(r):
    a = r.randint(10, 60)
    b, n, it = r.randint(1, a - 1), r.choice(NAMES), r.choice(ITEMS)
    return (
        f"{n} had {a} {it} and gave away {b} of them. How many {it} does {n} have left?",
        a - b,
        f"{n} starts with {a} {it} and gives away {b}: {a} - {b} = {a - b}.",
    )


def _mul(r):
    a, b, n, it = r.randint(2, 9), r.randint(2, 12), r.choice(NAMES), r.choice(ITEMS)
    return (
        f"{n} buys {a} bags with {b} {it} in each bag. How many {it} does {n} buy in total?",
        a * b,
        f"{a} bags with {b} {it} in each bag hold {a} * {b} = {a * b} {it}.",
    )


def _div(r):
    b, q, it = r.randint(2, 9), r.randint(2, 10), r.choice(ITEMS)
    n = r.choice(NAMES)
    return (
        f"{n} shares {b * q} {it} equally among {b} friends. How many {it} does each friend get?",
        q,
        f"{b * q} {it} shared equally among {b} friends is {b * q} / {b} = {q} each.",
    )


def _two_step(r):
    a, b, c, n, it = r.randint(5, 30), r.randint(2, 20), r.randint(1, 5), r.choice(NAMES), r.choice(ITEMS)
    return (
        f"{n} has {a} {it}, finds {b} more, then loses {c}. How many {it} does {n} have?",
        a + b - c,
        f"After finding {b} more, {n} has {a} + {b} = {a + b} {it}.\n"
        f"After losing {c}, {n} has {a + b} - {c} = {a + b - c} {it}.",
    )


def _price(r):
    p, k, n = r.randint(2, 15), r.randint(2, 8), r.choice(NAMES)
    return (
        f"A notebook costs {p} dollars. {n} buys {k} notebooks. How many dollars does {n} pay?",
        p * k,
        f"{k} notebooks at {p} dollars each cost {k} * {p} = {p * k} dollars.",
    )


KINDS = [_add, _sub, _mul, _div, _two_step, _price]


def make_problems(n: int = 200, seed: int = 1234, exclude: set[str] | frozenset = frozenset()) -> list[dict]:
    """``n`` distinct problems, templates in turn; texts in ``exclude`` are skipped.

    Each kind draws its numbers and words from ``random.Random(seed)`` and returns the
    problem, the answer and the worked steps; the solution adds the boxed answer.
    """
    r = random.Random(seed)
    out: list = []
    seen = set(exclude)
    while len(out) < n:
        kind = KINDS[len(out) % len(KINDS)]
        text, ans, steps = kind(r)
        if text in seen:
            continue
        seen.add(text)
        out.append(
            {
                "problem": text,
                "answer": str(ans),
                "kind": kind.__name__.strip("_"),
                "solution": f"{steps}\nThe answer is \\boxed{{{ans}}}",
            }
        )
    return out


def _write_rows(path: str | Path, rows: list[dict]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


def write(path: str | Path, n: int = 200, seed: int = 1234) -> Path:
    return _write_rows(path, make_problems(n, seed))


def write_heldout(path: str | Path, n: int = 64, seed: int = 999, seed_file_n: int = 200) -> Path:
    """Held-out problems from another seed, none of them in the seed file."""
    taken = {r["problem"] for r in make_problems(seed_file_n)}
    rows = [r for r in make_problems(n + seed_file_n, seed) if r["problem"] not in taken][:n]
    return _write_rows(path, rows)


SPIN_TRAIN_SEED, SPIN_HELDOUT_SEED, SPIN_N = 2024, 2025, 256


def shipped_problems() -> set[str]:
    """Problem texts of the seed and held-out files, as their writers draw them."""
    taken = {r["problem"] for r in make_problems(200)}
    held = [r["problem"] for r in make_problems(64 + 200, 999) if r["problem"] not in taken][:64]
    return taken | set(held)


def spin_splits(n_train: int = SPIN_N, n_heldout: int = SPIN_N) -> tuple[list[dict], list[dict]]:
    """SPIN train and held-out rows: disjoint from each other and from the shipped files.

    Exclusion happens inside ``make_problems``, so the templates still come in turn.
    """
    taken = shipped_problems()
    train = make_problems(n_train, SPIN_TRAIN_SEED, exclude=taken)
    heldout = make_problems(n_heldout, SPIN_HELDOUT_SEED, exclude=taken | {r["problem"] for r in train})
    return train, heldout


EFFICACY_HELDOUT_SEED, EFFICACY_HELDOUT_N = 2026, 256


def efficacy_heldout(n: int = EFFICACY_HELDOUT_N) -> list[dict]:
    """Held-out rows of the SeRL efficacy experiment: the same templates under another seed,
    disjoint from the seed, held-out and SPIN files (so from every training set shipped)."""
    train, heldout = spin_splits()
    taken = shipped_problems() | {r["problem"] for r in train + heldout}
    return make_problems(n, EFFICACY_HELDOUT_SEED, exclude=taken)


GUARD_PROBE_SEED, GUARD_PROBE_N = 2027, 512


def guard_probe(n: int = GUARD_PROBE_N) -> list[dict]:
    """Probe rows for the collapse guard (experiments/guard: 512 items are what its simulation
    needs to catch the arithmetic collapse), disjoint from every other shipped file."""
    train, heldout = spin_splits()
    taken = shipped_problems() | {r["problem"] for r in train + heldout + efficacy_heldout()}
    return make_problems(n, GUARD_PROBE_SEED, exclude=taken)


if __name__ == "__main__":
    import sys

    from serl.shipped import shipped_dir

    # into the given folder, else into serl's own dataset/ (the checkout's, in a checkout)
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else shipped_dir("dataset")
    root.mkdir(parents=True, exist_ok=True)
    print(write(root / "arith_seed.jsonl"))
    print(write_heldout(root / "arith_heldout.jsonl"))
    spin_train, spin_heldout = spin_splits()
    print(_write_rows(root / "arith_spin_train.jsonl", spin_train))
    print(_write_rows(root / "arith_spin_heldout.jsonl", spin_heldout))
    print(_write_rows(root / "arith_efficacy_heldout.jsonl", efficacy_heldout()))
    print(_write_rows(root / "arith_guard_probe.jsonl", guard_probe()))
