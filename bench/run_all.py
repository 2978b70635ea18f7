"""Run the six benchmarks one after another, then print the summary table (`make bench`).

Each bench is its own process (engines and thread pools do not leak into the next one);
a failing bench is reported and the others still run; the exit code is 1 if any failed.

    python bench/run_all.py --trl-python .venv-bench/bin/python
    python bench/run_all.py --only generation,weight_sync
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from _common import now
from summary import ORDER, newest, table

HERE = Path(__file__).resolve().parent
SCRIPTS = {"rl_step": "rl_step.py", "generation": "generation.py", "weight_sync": "weight_sync.py",
           "reward_vote": "reward_vote.py", "reward_server": "reward_server_load.py", "learner": "learner.py"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trl-python", default=None, help="python with TRL for rl_step (default .venv-bench)")
    ap.add_argument("--only", default=",".join(ORDER), help="comma-separated subset of " + ", ".join(ORDER))
    a = ap.parse_args(argv)
    chosen = [b.strip() for b in a.only.split(",") if b.strip()]
    unknown = [b for b in chosen if b not in SCRIPTS]
    if unknown:
        ap.error(f"--only: unknown bench {unknown}; choose from {', '.join(ORDER)}")
    start, failed = now(), []
    for name in chosen:
        cmd = [sys.executable, str(HERE / SCRIPTS[name])]
        if name == "rl_step" and a.trl_python:
            cmd += ["--trl-python", a.trl_python]
        print(f"\n=== {name}: {' '.join(cmd[1:])}", flush=True)
        t = time.perf_counter()
        if subprocess.run(cmd).returncode != 0:
            failed.append(name)
        print(f"=== {name}: {time.perf_counter() - t:.0f} s{' (FAILED)' if name in failed else ''}", flush=True)
    print("\n" + table(newest(since=start)))
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
