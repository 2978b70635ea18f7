"""Math transfer, SPIRAL's central claim (Liu et al., 2025): greedy pass@1 on GSM8K and SVAMP
subsets before and after game training, paired by problem.

The problems are read from ../shared/data at run time (GSM8K test.jsonl; SVAMP as SeRL ships it,
through experiments/serl_efficacy/tasks.py) and a seeded sample is written to OUT/math/data/, never
into the repository. The prompt and limit are the third serl_efficacy round's, chosen there by a
probe of this same model on GSM8K *training* problems (serl's default instruction, 384 new tokens:
7% cut): nothing here was chosen on these test problems. The evaluation itself is serl_efficacy's
(``heldout.Evaluator``: greedy, ``\\boxed{}``-only and last-number grading, cut and boxed flags,
one fresh engine with seed 0 per model).
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
EFFICACY = HERE.parent / "serl_efficacy"
sys.path[:0] = [str(HERE.parents[1]), str(EFFICACY)]

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
MAX_LEN = 384
SEED = 2033  # the sample's seed (issue 33)


def write_problems(out: Path, n_gsm8k: int, n_svamp: int) -> dict[str, Path]:
    """OUT/math/data/{gsm8k,svamp}.jsonl (problem, answer, source line); a rerun that would write
    other problems stops."""
    from tasks import GSM8K, svamp

    from serl.data.seeds import gsm8k_final_answer

    rows = []
    with open(GSM8K / "test.jsonl", encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            r = json.loads(line)
            rows.append({"question": r["question"], "label": gsm8k_final_answer(r["answer"]),
                         "where": f"gsm8k/test.jsonl:{i}"})
    rng = random.Random(SEED)
    parts = {"gsm8k": rng.sample(rows, n_gsm8k), "svamp": rng.sample(svamp(), n_svamp)}
    paths = {}
    for name, sample in parts.items():
        text = "".join(json.dumps({"problem": r["question"], "answer": r["label"],
                                   "source": str(r["where"]).rsplit("data/", 1)[-1]}) + "\n" for r in sample)
        path = out / "math" / "data" / f"{name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.read_text() != text:
            raise SystemExit(f"{path}: differs from what these settings write; use another --out")
        path.write_text(text)
        paths[name] = path
    return paths


def evaluate(out: Path, models: dict[str, str], base: str, n_gsm8k: int, n_svamp: int,
             generator: str = "auto", max_len: int = MAX_LEN) -> dict[str, dict[str, dict]]:
    """{benchmark: {tag: result}} for every model; each result is cached in OUT/math/eval/<tag>_<bench>.json."""
    from heldout import Evaluator

    from serl.data.seeds import read_seeds

    cfg = SimpleNamespace(system_prompt=INSTRUCTION, generate_max_len=max_len, temperature=0.0, top_p=1.0)
    res: dict[str, dict[str, dict]] = {}
    for bench, path in write_problems(out, n_gsm8k, n_svamp).items():
        ev = Evaluator(out / "math" / "eval", read_seeds(path, "problem", "answer"), cfg, generator, base)
        try:
            res[bench] = {tag: ev.evaluate(f"{tag}_{bench}", model, step=0, k=0) for tag, model in models.items()}
        finally:
            ev.close()
    return res


def table(res: dict[str, dict[str, dict]], base_tag: str = "theta0") -> str:
    from serl.eval.stats import mcnemar_p, paired_bootstrap, wilson

    lines = ["| benchmark | model | pass@1 [95% CI] | change vs θ0 [95% CI] | gained / lost (McNemar p) | cut | boxed | "
             "finished by both: change [95% CI] (n) |", "|---|---|---|---|---|---|---|---|"]
    for bench, by_tag in res.items():
        b = by_tag.get(base_tag)
        for tag, r in by_tag.items():
            c, n = r["correct_number"], r["n"]
            lo, hi = wilson(sum(c), n)
            row = f"| {bench} | {tag} | {sum(c) / n:.1%} [{lo:.1%}, {hi:.1%}] (n={n}) | "
            if b is not None and tag != base_tag:
                d, dlo, dhi = paired_bootstrap([float(x) for x in b["correct_number"]], [float(x) for x in c])
                up = sum(y > x for x, y in zip(b["correct_number"], c))
                down = sum(x > y for x, y in zip(b["correct_number"], c))
                row += f"{100 * d:+.1f} [{100 * dlo:+.1f}, {100 * dhi:+.1f}] | {up} / {down} (p = " \
                       f"{mcnemar_p(b['correct_number'], c):.2f}) | "
            else:
                row += " | | "
            row += f"{sum(r['truncated']) / n:.1%} | {sum(r['boxed']) / n:.1%} | "
            if b is not None and tag != base_tag:  # correctness apart from stopping: items neither model cut
                done = [i for i in range(n) if not b["truncated"][i] and not r["truncated"][i]]
                if done:
                    d, dlo, dhi = paired_bootstrap([float(b["correct_number"][i]) for i in done],
                                                   [float(c[i]) for i in done])
                    row += f"{100 * d:+.1f} [{100 * dlo:+.1f}, {100 * dhi:+.1f}] ({len(done)}) |"
                else:
                    row += "none |"
            else:
                row += " |"
            lines.append(row)
    return "\n".join(lines)
