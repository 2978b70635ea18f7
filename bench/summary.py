"""The six targets in one markdown table, from the newest record of each bench in results.jsonl.

    python bench/summary.py [--since 2026-11-22T09:00]     # what bench/README.md's table shows
"""
from __future__ import annotations

import argparse
import json

from _common import RESULTS

ORDER = ("rl_step", "generation", "weight_sync", "reward_vote", "reward_server", "learner")


def _rl_step(r):
    s = r["summary"]
    if "serl" not in s or "trl" not in s:
        return "one side only", "<= 0.33x TRL", None
    return (f"serl {s['serl']['step']['median']:.1f} s vs TRL {trl_version(r)} {s['trl']['step']['median']:.1f} s"
            f" per step: **{r['ratio']:.2f}x**", "<= 0.33x", r["ratio"] <= 1 / 3)


def trl_version(r) -> str:
    return r.get("trl") or "?"


def _generation(r):
    t = r["tokens_per_s"]
    return (f"serl {t['serl VLLMGenerator']['median']:.0f} vs raw vLLM {t['raw vLLM']['median']:.0f} tokens/s:"
            f" **{r['ratio']:.2f}**", ">= 0.9", r["ratio"] >= 0.9)


def _weight_sync(r):
    s = r["seconds"]
    return (f"**{s['median']:.2f} s** (min {s['min']:.2f}, max {s['max']:.2f})", "<= 1 s", s["median"] <= 1.0)


def _reward_vote(r):
    best = max(r["speedup_1_worker"], r["speedup_2_workers"])
    return (f"**{r['speedup_1_worker']:.1f}x** (1 worker), {r['speedup_2_workers']:.1f}x (2), rewards identical",
            ">= 10x", best >= 10)


def _reward_server(r):
    if "modes" not in r:
        return "old record format", ">= 500 req/s", None
    m = r["modes"]
    parts = [f"{'new connection per request' if k == 'new' else 'keep-alive'} "
             f"{v['req_per_s']['median']:.0f} req/s (min {v['req_per_s']['min']:.0f})" for k, v in m.items()]
    right = "yes" if r["all_right"] else "NO"
    return (f"**{', '.join(parts)}**, {r['clients']} clients, 0 errors and right rewards: {right}",
            ">= 500 req/s", r["target_met"])


def _learner(r):
    new = [x for x in r["results"] if x.get("path", "new") == "new"]  # --paths old,new: the target is new's
    parts = [f"{x['dtype']} {100 * x['mfu']:.0f} %" for x in new]
    old = [f"{x['dtype']} {100 * x['mfu']:.0f} %" for x in r["results"] if x.get("path") == "old"]
    met = " / ".join(f"{x['dtype']} {'yes' if x['mfu'] >= 0.40 else 'no'}" for x in new)
    before = f"; old path {', '.join(old)}" if old else ""
    return "MFU " + ", ".join(parts) + f" ({r.get('threads', '?')} threads{before})", ">= 40 %", met


ROWS = {"rl_step": ("Full RL step vs TRL GRPOTrainer", _rl_step),
        "generation": ("Generation: serl / raw vLLM", _generation),
        "weight_sync": ("Weight sync into vLLM", _weight_sync),
        "reward_vote": ("Reward: vote vs pairwise", _reward_vote),
        "reward_server": ("Reward server, one sample per request", _reward_server),
        "learner": ("Learner MFU", _learner)}


def newest(path=RESULTS, since: str = "") -> dict[str, dict]:
    out: dict[str, dict] = {}
    for line in open(path):
        if line.strip():
            r = json.loads(line)
            if r.get("date", "") >= since:
                out[r["bench"]] = r
    return out


def table(records: dict[str, dict]) -> str:
    lines = ["| benchmark | measured | target | met | date | load avg |", "|---|---|---|---|---|---|"]
    for name in ORDER:
        label, fn = ROWS[name]
        if name not in records:
            lines.append(f"| {label} | not run | | | | |")
            continue
        r = records[name]
        measured, target, met = fn(r)
        load = r.get("load_avg_1m_at_end", r.get("load_avg_1m", ""))
        met = met if isinstance(met, str) else ("yes" if met else "no")
        load = f"{load:.1f}" if isinstance(load, (int, float)) else load
        lines.append(f"| {label} | {measured} | {target} | {met} | {r['date'][:16]} | {load} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--since", default="", help="only records at or after this ISO date")
    ap.add_argument("--results", default=str(RESULTS), help="the JSONL the benches append to")
    a = ap.parse_args(argv)
    recs = newest(a.results, a.since)
    machines = sorted({r["machine"] for r in recs.values() if "machine" in r})
    print(table(recs))
    print(f"\nmachine: {'; '.join(machines)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
