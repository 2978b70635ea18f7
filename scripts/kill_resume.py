"""Random SIGKILLs, then --resume: is the resumed run the uninterrupted one, to the last weight?

A hand-run campaign (too long for CI; its K/N per mode is recorded in docs/resume.md). Per mode:
one uninterrupted reference run, then N trials. A trial starts the same run and kills it up to
--kills times, each kill either from outside (SIGKILL of the main process after a random share of
the reference's wall time, as the OOM killer does) or injected by the run itself at a random fault
point (``SERL_FAULT=generate|learner|checkpoint:STEP``, serl.run.checkpoint.fault_point), resuming with
``serl train --resume`` after each, and a last resume runs to the end. The trial is exact when the
metrics (all but times), the pool's added problems, the checkpoint steps kept, and the final
checkpoint (policy weights bit for bit, optimizer moments, schedule, RNG and data-order state)
equal the reference's.

    .venv/bin/python scripts/kill_resume.py --mode async share_prompts lora ray --trials 3 --kills 2

Writes OUT/summary.json and prints one line per trial and a K/N line per mode.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import os
import platform
import random
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from conftest import TINY_TRAIN  # noqa: E402  (the smallest real SeRL run of the tests)

_spec = importlib.util.spec_from_file_location("_resume_helpers", ROOT / "tests" / "test_resume.py")
H = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(H)  # _start, _finish, _checkpoint_differences, metrics, pool_events

SEEDS = str(ROOT / "dataset" / "arith_seed.jsonl")
RAY = ["--pretrain", "smollm2", "--prompt_data", SEEDS, "--steps", "3", "--rollout_batch_size", "1",
       "--n_samples_per_prompt", "2", "--generate_max_len", "16", "--max_refill_rounds", "1",
       "--enable_self_evolution", "false", "--reward_difficulty_bounds", "0", "1", "--generator", "hf",
       "--learner", "torch", "--actor_num_gpus_per_node", "1", "--vllm_num_engines", "1", "--init_kl_coef", "0",
       "--actor_learning_rate", "1e-4", "--lr_warmup_ratio", "0", "--save_steps", "1", "--max_ckpt_num", "2",
       "--save_model", "false", "--progress", "quiet", "--ray"]  # tests/distributed/test_ray_resume.py, 3 steps
MODES = {
    "plain": TINY_TRAIN,
    "async": [*TINY_TRAIN, "--async_train", "--importance_sampling_correction", "--importance_sampling_cap", "1.0",
              "--max_staleness", "1"],
    "share_prompts": [*TINY_TRAIN, "--share_prompts", "true"],
    "lora": [*TINY_TRAIN, "--lora_rank", "8", "--lora_alpha", "16", "--actor_learning_rate", "1e-3"],
    "ray": RAY,
}
FAULTS = ("generate", "learner", "checkpoint")


def _steps(args) -> int:
    return int(args[len(args) - 1 - args[::-1].index("--steps") + 1])


def run_once(args, run_dir: Path, log: Path, fault=None, kill_after=None) -> tuple[int, bool, float]:
    """One `serl train`: a fresh start, or --resume once config.yaml is there. (rc, killed, seconds)."""
    cmd = ["--resume", run_dir] if (run_dir / "config.yaml").exists() else ["--run_dir", run_dir, *args]
    env_ray = os.environ.pop("RAY_ADDRESS", None)  # a local Ray cluster of its own
    t0 = time.monotonic()
    try:
        proc = H._start(cmd, log, fault=fault)
    finally:
        if env_ray is not None:
            os.environ["RAY_ADDRESS"] = env_ray
    rc, killed = H._finish(proc, kill_after=kill_after)
    return rc, killed, time.monotonic() - t0


def compare(a: Path, b: Path) -> list[str]:
    """What differs between the reference run ``a`` and the resumed run ``b`` (empty: exact)."""
    from serl.run.checkpoint import complete_checkpoints

    out = []
    ma, mb = H.metrics(a), H.metrics(b)
    if ma != mb:
        bad = [m.get("step") for m, n in zip(ma, mb) if m != n]
        out.append(f"metrics differ (steps {[m['step'] for m in mb]} vs {[m['step'] for m in ma]}, first "
                   f"different step {bad[:1]})")
    if (a / "pool.jsonl").exists():
        adds = lambda d: [e["item"]["text"] for e in H.pool_events(d) if e["e"] == "add"]
        if adds(a) != adds(b):
            out.append("pool additions differ")
    ca, cb = complete_checkpoints(a), complete_checkpoints(b)
    if [c.name for c in ca] != [c.name for c in cb]:
        out.append(f"checkpoints {[c.name for c in cb]} vs {[c.name for c in ca]}")
    elif ca:
        out += H._checkpoint_differences(ca[-1], cb[-1])
    if list((b / "checkpoints").glob(".tmp-*")):
        out.append("a half-written checkpoint was left")
    return out


def trial(mode: str, n: int, seed: int, kills: int, ref: Path, ref_s: float, out: Path) -> dict:
    args, rng = MODES[mode], random.Random(f"{seed}-{mode}-{n}")
    b = out / mode / f"trial{n}"
    shutil.rmtree(b, ignore_errors=True)
    b.mkdir(parents=True)
    plan = []
    for _ in range(kills):
        if rng.random() < 0.5:
            plan.append(("outside", round(rng.uniform(0.05, 1.0) * ref_s, 1)))
        else:
            plan.append(("fault", f"{rng.choice(FAULTS)}:{rng.randint(1, _steps(args))}"))
    events = []
    for i, (kind, what) in enumerate([*plan, ("final", None)]):
        log = b.parent / f"trial{n}.{i}.err"
        rc, killed, s = run_once(args, b, log, fault=what if kind == "fault" else None,
                                 kill_after=what if kind == "outside" else None)
        died = killed or rc == -9
        events.append(f"{kind} {what}: rc {rc}{' (killed)' if died else ''}, {s:.0f} s, "
                      f"checkpoint step {H._last_ckpt_step(b)}")
        if not died:  # it ended: a fault point not reached (its step already checkpointed), or the last run
            break
    kills_done = sum("(killed)" in e for e in events)
    diff = compare(ref, b) if rc == 0 else [f"exit {rc}: {log.read_text()[-600:]}"]
    return {"mode": mode, "trial": n, "exact": not diff, "kills": kills_done, "events": events, "diff": diff}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", nargs="+", choices=sorted(MODES), default=["async", "share_prompts", "lora", "ray"])
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--kills", type=int, default=2, help="planned kills per trial (fewer when the run ends first)")
    p.add_argument("--jobs", type=int, default=2, help="trials run side by side (one thread each)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("runs/kill_resume"))
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    results = []
    for mode in a.mode:
        ref = a.out / mode / "reference"
        shutil.rmtree(ref, ignore_errors=True)
        ref.parent.mkdir(parents=True, exist_ok=True)
        rc, _, ref_s = run_once(MODES[mode], ref, a.out / mode / "reference.err")
        if rc != 0:
            print(f"{mode}: the reference run failed (exit {rc}); see {a.out / mode / 'reference.err'}")
            results.append({"mode": mode, "reference_failed": rc})
            continue
        print(f"{mode}: reference {ref_s:.0f} s", flush=True)
        with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
            futs = [pool.submit(trial, mode, n, a.seed, a.kills, ref, ref_s, a.out) for n in range(a.trials)]
            done = [f.result() for f in futs]
        for r in done:
            print(f"  trial {r['trial']}: {'exact' if r['exact'] else 'DIFFERENT'} after {r['kills']} kill(s): "
                  + "; ".join(r["events"]) + ("" if r["exact"] else f" -- {r['diff'][:5]}"), flush=True)
        k = sum(r["exact"] for r in done)
        print(f"{mode}: {k}/{len(done)} exact ({sum(r['kills'] for r in done)} kills in all)", flush=True)
        results += done
    summary = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "argv": sys.argv[1:],
               "machine": f"{platform.node()}: {os.cpu_count()} cores, {platform.platform()}", "results": results}
    (a.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if all(r.get("exact") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
