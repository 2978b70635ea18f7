"""The fifth round's task, chosen on training problems only (issue 62, part 2).

    python experiments/serl_efficacy/probe_round5.py                      # every candidate, in order
    python experiments/serl_efficacy/probe_round5.py --task gsm8k_3step   # one candidate
    python experiments/serl_efficacy/probe_round5.py --table              # rebuild probe_round5.md (no torch)

For each candidate task, `serl probe` (the precondition check of issue 61, part 4) runs
Qwen2.5-Coder-0.5B-Instruct on a seeded sample of the task's **training** pool: a greedy
answer and 8 samples at the training temperature per problem, voted with the training vote,
and both checked against the reference answer. Nothing from a held-out or transfer set is read.

Candidates:
  gsm8k_1step .. gsm8k_4step   GSM8K train.jsonl problems whose reference solution makes exactly
                               1, 2, 3 or 4 calculator calls (``<<a*b=c>>``), 384 tokens (the
                               fourth round's limit)
  arith                        the shipped arithmetic seeds (dataset/arith_seed.jsonl), 128 tokens
                               (the second and third rounds' limit)

What decides (fixed before the first probe ran): the vote can teach most where maj@8 - greedy
is largest, with the vote's accuracy in its clear-majority groups as the tie-break; a task whose
maj@8 - greedy interval (paired, problems are the same) reaches below 0 is ruled out.

The kept files (``items/probe5/<task>.json``: settings, summary, and per problem its source line
in ../shared/data or dataset/, the greedy and the voted answers and the majority's share) hold
no problem text; ``--table`` rebuilds the table from them with the standard library alone.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
OUT = HERE / "items" / "probe5"
# the amendment's probe: the same problems again, with cut flags and the answers' texts kept
CUT_OUT = HERE / "items" / "probe5_cut"
CONTENDERS = ("arith", "gsm8k_2step")  # the candidates whose maj@8 - greedy interval is above 0
TABLE = HERE / "probe_round5.md"
CALLS = {"gsm8k_1step": 1, "gsm8k_2step": 2, "gsm8k_3step": 3, "gsm8k_4step": 4}
ORDER = ("arith", "gsm8k_1step", "gsm8k_2step", "gsm8k_3step", "gsm8k_4step")  # the table's order
# the probing order: gsm8k_2step last, as the third round probed it already (same 100 problems, other script)
RUN_ORDER = ("arith", "gsm8k_1step", "gsm8k_3step", "gsm8k_4step", "gsm8k_2step")
MAX_LEN = {"arith": 128}  # GSM8K: 384
PROBLEMS, K, TEMPERATURE, SEED = 100, 8, 0.8, 7


def pool(task: str) -> list[dict]:
    """The task's training pool as rows of problem, answer and source (file:line)."""
    if task == "arith":
        path = ROOT / "dataset" / "arith_seed.jsonl"
        rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        return [
            {"problem": r["problem"], "answer": r["answer"], "source": f"dataset/arith_seed.jsonl:{i}"}
            for i, r in enumerate(rows, 1)
        ]
    from tasks import GSM8K

    from serl.data.seeds import gsm8k_final_answer

    out = []
    path = GSM8K / "train.jsonl"
    if not path.is_file():
        raise SystemExit(f"{path}: not found (GSM8K is read from ../shared/data/gsm8k)")
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            r = json.loads(line)
            if r["answer"].count("<<") == CALLS[task]:
                out.append({"problem": r["question"], "answer": gsm8k_final_answer(r["answer"]),
                            "source": f"../shared/data/gsm8k/train.jsonl:{i}"})
    return out


def probe(task: str, work: Path, out: Path = OUT) -> Path:
    rows = pool(task)
    sample = random.Random(SEED).sample(rows, min(PROBLEMS, len(rows)))
    data = work / f"{task}.jsonl"
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_text("".join(json.dumps(r) + "\n" for r in sample))
    raw = work / f"{task}.probe.json"
    cmd = [sys.executable, "-m", "serl.cli", "probe", "--model", "qwen2.5-coder-0.5b", "--prompt_data", str(data),
           "--n", "0", "--k", str(K), "--temperature", str(TEMPERATURE),
           "--generate_max_len", str(MAX_LEN.get(task, 384)), "--seed", str(SEED), "--out", str(raw)]
    if out == CUT_OUT:
        cmd.append("--keep_texts")
    if subprocess.run(cmd, cwd=ROOT).returncode != 0:
        raise SystemExit(f"serl probe failed on {task}")
    res = json.loads(raw.read_text())
    for item, row in zip(res["items"], sample):
        item["source"] = row["source"]
    res["task"], res["pool"] = task, len(rows)
    res["settings"] = {k: v for k, v in res["settings"].items() if k not in ("prompt_data", "out")}
    out.mkdir(parents=True, exist_ok=True)
    kept = out / f"{task}.json"
    kept.write_text(json.dumps(res, indent=1) + "\n")
    return kept


def paired_ci(items: list[dict]) -> tuple[float, float, float]:
    """maj@K - greedy, with a 95% paired interval (normal, over the problems' differences)."""
    d = [int(bool(it["vote_ok"])) - int(bool(it["greedy_ok"])) for it in items]
    n = len(d)
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    m = sum(d) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in d) / max(1, n - 1))
    h = 1.96 * sd / math.sqrt(n)
    return m, m - h, m + h


def table() -> str:
    lines = [
        "| task (training pool) | pool | problems | tokens | greedy | maj@8 | maj@8 - greedy [95% CI] | vote right where clear "
        "| clear majority | mean majority share | greedy is the vote |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for task in ORDER:
        f = OUT / f"{task}.json"
        if not f.is_file():
            lines.append(f"| {task} | not probed | | | | | | | | | |")
            continue
        r = json.loads(f.read_text())
        s, items = r["summary"], r["items"]
        m, lo, hi = paired_ci(items)
        clear = "-" if s["vote_acc_clear"] is None else f"{100 * s['vote_acc_clear']:.0f} %"
        lines.append(
            f"| {task} | {r['pool']} | {s['problems']} | {r['settings']['generate_max_len']} | "
            f"{100 * s['greedy_acc']:.0f} % | {100 * s['maj@8_acc']:.0f} % | {100 * m:+.0f} [{100 * lo:+.0f}, {100 * hi:+.0f}] | "
            f"{clear} | {100 * s['clear_majority_share']:.0f} % | {100 * s['mean_majority_share']:.0f} % | "
            f"{100 * s['greedy_is_vote_share']:.0f} % |"
        )
    return "\n".join(lines)


THRESHOLDS = (0.375, 0.5, 0.625, 0.75)  # majority shares of 8 samples: 3, 4, 5, 6 of 8


def mask_table() -> str:
    """For CuMa's mask (--min_majority_share): at each threshold, the share of groups kept and the
    vote's accuracy in them, beside its accuracy in all groups (the option's case on training data)."""
    head = " | ".join(f"share >= {t:g}: kept, vote right" for t in THRESHOLDS)
    lines = [f"| task | all groups: vote right | {head} |", "|---|---|" + "---|" * len(THRESHOLDS)]
    for task in ORDER:
        f = OUT / f"{task}.json"
        if not f.is_file():
            continue
        items = json.loads(f.read_text())["items"]
        cells = []
        for t in THRESHOLDS:
            kept = [it for it in items if it["vote"] is not None and it["share"] >= t - 1e-9]
            right = sum(bool(it["vote_ok"]) for it in kept)
            cells.append(f"{100 * len(kept) / len(items):.0f} %, {100 * right / max(1, len(kept)):.0f} %")
        allright = sum(bool(it["vote_ok"]) for it in items) / len(items)
        lines.append(f"| {task} | {100 * allright:.0f} % | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cut_table() -> str:
    """The amendment's numbers: cut shares, and maj@8 - greedy where the greedy answer finished."""
    lines = [
        "| task | problems | greedy cut | samples cut | maj@8 - greedy, all [95% CI] | greedy finished | "
        "greedy there | maj@8 there | **maj@8 - greedy where greedy finished [95% CI]** |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for task in CONTENDERS:
        f = CUT_OUT / f"{task}.json"
        if not f.is_file():
            lines.append(f"| {task} | not probed | | | | | | | |")
            continue
        items = json.loads(f.read_text())["items"]
        done = [it for it in items if not it["greedy_cut"]]
        m, lo, hi = paired_ci(items)
        fm, flo, fhi = paired_ci(done)
        g = sum(bool(it["greedy_ok"]) for it in done) / max(1, len(done))
        v = sum(bool(it["vote_ok"]) for it in done) / max(1, len(done))
        lines.append(
            f"| {task} | {len(items)} | {100 * sum(it['greedy_cut'] for it in items) / len(items):.0f} % | "
            f"{100 * sum(it['samples_cut'] for it in items) / len(items):.0f} % | "
            f"{100 * m:+.0f} [{100 * lo:+.0f}, {100 * hi:+.0f}] | {len(done)} | {100 * g:.0f} % | {100 * v:.0f} % | "
            f"**{100 * fm:+.0f} [{100 * flo:+.0f}, {100 * fhi:+.0f}]** |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", choices=ORDER, help="probe one candidate (default: every one not yet kept)")
    ap.add_argument("--work", default=str(ROOT / "runs" / "probe5"), help="where the sampled problems go (not kept)")
    ap.add_argument("--table", action="store_true", help="rebuild probe_round5.md from items/probe5/ only")
    ap.add_argument("--cut", action="store_true", help="the amendment: probe the contenders again with cut flags")
    a = ap.parse_args(argv)
    if a.cut and not a.table:
        for task in [t for t in CONTENDERS if not (CUT_OUT / f"{t}.json").is_file()]:
            print(f"probing {task} again, with cut flags ...", flush=True)
            probe(task, Path(a.work), CUT_OUT)
    elif not a.table:
        for task in [a.task] if a.task else [t for t in RUN_ORDER if not (OUT / f"{t}.json").is_file()]:
            print(f"probing {task} ...", flush=True)
            probe(task, Path(a.work))
    text = table() + "\n\nThe vote where the majority is clear (CuMa's mask on training data):\n\n" + mask_table()
    if any((CUT_OUT / f"{t}.json").is_file() for t in CONTENDERS):
        text += (
            "\n\nThe amendment (the same problems again, `items/probe5_cut/`): cut answers, and the vote's lead "
            "where greedy finished:\n\n" + cut_table()
        )
    TABLE.write_text("# The fifth round's task probe (generated by `probe_round5.py --table`)\n\n" + text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
