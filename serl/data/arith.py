"""A deterministic generator of grade-school arithmetic word problems with exact answers.

This is the seed set that ships with serl (``dataset/arith_seed.jsonl``), written by
us so that the quickstart needs no downloaded data. Problems are short and easy on
purpose: a 135M model must agree with itself often enough for majority voting to
give a learning signal. Regenerate both files with ``python -m serl.data.arith``.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivo", "Jia",
         "Kofi", "Lena", "Mateo", "Nia", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tomas"]
ITEMS = ["apples", "pencils", "marbles", "stickers", "books", "cookies", "stamps",
         "shells", "cards", "balloons", "oranges", "coins"]


def _add(r):
    a, b, n, it = r.randint(2, 40), r.randint(2, 40), r.choice(NAMES), r.choice(ITEMS)
    return f"{n} has {a} {it}. A friend gives {n} {b} more {it}. How many {it} does {n} have now?", a + b


def _sub(r):
    a = r.randint(10, 60)
    b, n, it = r.randint(1, a - 1), r.choice(NAMES), r.choice(ITEMS)
    return f"{n} had {a} {it} and gave away {b} of them. How many {it} does {n} have left?", a - b


def _mul(r):
    a, b, n, it = r.randint(2, 9), r.randint(2, 12), r.choice(NAMES), r.choice(ITEMS)
    return f"{n} buys {a} bags with {b} {it} in each bag. How many {it} does {n} buy in total?", a * b


def _div(r):
    b, q, it = r.randint(2, 9), r.randint(2, 10), r.choice(ITEMS)
    n = r.choice(NAMES)
    return f"{n} shares {b * q} {it} equally among {b} friends. How many {it} does each friend get?", q


def _two_step(r):
    a, b, c, n, it = r.randint(5, 30), r.randint(2, 20), r.randint(1, 5), r.choice(NAMES), r.choice(ITEMS)
    return (f"{n} has {a} {it}, finds {b} more, then loses {c}. How many {it} does {n} have?",
            a + b - c)


def _price(r):
    p, k, n = r.randint(2, 15), r.randint(2, 8), r.choice(NAMES)
    return f"A notebook costs {p} dollars. {n} buys {k} notebooks. How many dollars does {n} pay?", p * k


KINDS = [_add, _sub, _mul, _div, _two_step, _price]


def make_problems(n: int = 200, seed: int = 1234) -> list[dict]:
    r = random.Random(seed)
    out, seen = [], set()
    while len(out) < n:
        kind = KINDS[len(out) % len(KINDS)]
        text, ans = kind(r)
        if text in seen:
            continue
        seen.add(text)
        out.append({"problem": text, "answer": str(ans), "kind": kind.__name__.strip("_")})
    return out


def write(path: str | Path, n: int = 200, seed: int = 1234) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in make_problems(n, seed):
            f.write(json.dumps(row) + "\n")
    return path


def write_heldout(path: str | Path, n: int = 64, seed: int = 999, seed_file_n: int = 200) -> Path:
    """Held-out problems from another seed, none of them in the seed file."""
    taken = {r["problem"] for r in make_problems(seed_file_n)}
    rows = [r for r in make_problems(n + seed_file_n, seed) if r["problem"] not in taken][:n]
    path = Path(path)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[2] / "dataset"
    print(write(root / "arith_seed.jsonl"))
    print(write_heldout(root / "arith_heldout.jsonl"))
