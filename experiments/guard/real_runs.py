"""The guard on two real runs (issue 61, parts 1b, 2 and 3): one that collapses, one that improves.

    python experiments/guard/real_runs.py collapse            # arm b of the Qwen arithmetic round
    python experiments/guard/real_runs.py improving           # arm c of the same round
    python experiments/guard/real_runs.py collapse --resume   # after an interruption
    python experiments/guard/real_runs.py improving --probe 256   # the setting chosen on the collapse
    python experiments/guard/real_runs.py collapse --probe 256 --seed 7   # a fresh collapse to test it on
    python experiments/guard/real_runs.py collapse --probe 512            # the setting that passes the simulation
    python experiments/guard/real_runs.py collapse --probe 512 --every 1 --seed 7   # a check every step
    python experiments/guard/real_runs.py collapse --probe 512 --mode rollback --lr_scale 1 --steps 24  # part 5
    python experiments/guard/real_runs.py --table             # rebuild real_runs.md from items/ (no torch)

Both are the second round of ``experiments/serl_efficacy`` (Qwen2.5-Coder-0.5B, the shipped
arithmetic seeds, 128 tokens), counted in steps instead of minutes:
  collapse   arm b, the majority vote on the 200 seeds alone: in that round it reached 89.5 % at
             step 5 and fell to 54.0 % by step 15
  improving  arm c, the rule reward with the seed labels: 73 % -> 95 % by step 5, and it stayed
Each runs the guard in ``watch`` mode with its defaults (the spent rule, patience 2), so the
whole curve is seen: ``stop`` takes the same decisions up to its first firing (one code path,
``serl/run/guard.py``) and then ends the run with the policy kept in RUN_DIR/guard_best. The
held-out pass@1 (the first 200 problems of dataset/arith_efficacy_heldout.jsonl, never
trained on) is evaluated at every guard check, so each check has its truth beside it.

``--probe 256`` draws a 256-problem probe from ``dataset/arith_spin_train.jsonl`` (training-side
problems, disjoint from the seeds and the held-out set: the 200 seeds are too few) and sets
``--guard_margin 0``, the strongest of the settings ``candidates.py`` tried on the collapse
(none met its line; README, "Choosing a setting on the collapse"). Its runs are named
``<run>_p256`` (and ``_s<seed>`` for another seed). ``--probe 512`` (the one setting that passed
candidates.py's line, after the second collapse) draws from ``dataset/arith_guard_probe.jsonl``,
512 problems generated for it, disjoint from every other shipped file; its runs are
``<run>_p512``. Anchors are kept in ``items/anchors/`` so that no machine computes one twice; a
512-item probe is the whole file for every seed, so a run with another seed reuses the kept anchor
(the untrained model's vote is the model's, not the run's; serl checks the probe's prompts match).

``--every N`` checks (and evaluates held-out) every N steps instead of 2; ``--mode stop`` or
``rollback`` lets the guard act (part 5: ``--lr_scale`` and ``--lr_floor`` set the rollback's
learning-rate cut; ``--steps`` lengthens the run so that what follows a rollback is seen). Each
setting that differs from the first runs' adds to the name: ``_e1``, ``_rollback``, ``_lr1``,
``_floor0.5``, ``_n24``.

After a run its per-item files (metrics, guard checks with the probe's answers, the held-out
answers with their texts) are copied to ``items/<run>/``, from which ``--table`` rebuilds
``real_runs.md`` with the standard library alone.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ITEMS = HERE / "items"
KEEP = ("metrics.jsonl", "guard_items.jsonl", "guard_anchor.jsonl", "eval_items.jsonl", "eval_records.jsonl", "guard_best.json")
ANCHOR = "guard_anchor.jsonl"  # one anchor for both runs: same model, probe, seed and prompt
STEPS, EVERY, HELDOUT = 16, 2, 200
RUNS = {"collapse": "b", "improving": "c"}
# training-side problems the run neither trains nor evaluates on (the 200 seeds are too few)
PROBE_DATA = {256: "dataset/arith_spin_train.jsonl", 512: "dataset/arith_guard_probe.jsonl"}
ANCHORS = ITEMS / "anchors"


@dataclass(frozen=True)
class Setting:
    """What a guard run varies; the defaults are the first runs' (watch mode, a check every 2 steps)."""

    probe: int = 64
    seed: int = 42
    every: int = EVERY
    mode: str = "watch"
    lr_scale: float = 0.5
    lr_floor: float = 0.0
    steps: int = STEPS


def name(run: str, s: Setting) -> str:
    """The run directory's (and items/ folder's) name: the plain arm, its probe and seed, and what
    else differs from the first runs."""
    tag = run + (f"_p{s.probe}" if s.probe != 64 else "") + (f"_s{s.seed}" if s.seed != 42 else "")
    tag += f"_e{s.every}" if s.every != EVERY else ""
    tag += f"_{s.mode}" if s.mode != "watch" else ""
    tag += f"_lr{s.lr_scale:g}" if s.lr_scale != 0.5 else ""
    tag += f"_floor{s.lr_floor:g}" if s.lr_floor else ""
    return tag + (f"_n{s.steps}" if s.steps != STEPS else "")


def setting_flags(s: Setting) -> list[str]:
    """The flags that replace flags()'s check schedule, mode and length (argparse: the last wins)."""
    if s == Setting(s.probe, s.seed):
        return []
    every = str(s.every)
    return ["--steps", str(s.steps), "--collapse_guard", s.mode, "--guard_every", every, "--eval_steps", every,
            "--save_steps", every, "--guard_lr_scale", f"{s.lr_scale:g}", "--guard_lr_floor", f"{s.lr_floor:g}"]


def probe_flags(probe: int, seed: int) -> list[str]:
    if probe == 64:
        return [] if seed == 42 else ["--seed", str(seed)]
    return ["--guard_probe", str(probe), "--guard_margin", "0", "--guard_probe_data", PROBE_DATA[probe], "--seed", str(seed)]


def flags(run: str) -> list[str]:
    """Round two's settings for the arm (``serl_efficacy/run.py``: FULL and its Qwen memory flags),
    with the guard watching and the held-out set evaluated at each of its checks."""
    sys.path.insert(0, str(ROOT / "experiments" / "serl_efficacy"))
    import run as efficacy  # noqa: PLC0415 (the round's own flag builder, so the two cannot drift)

    args = argparse.Namespace(
        **efficacy.FULL,
        task="arith",
        model="qwen2.5-coder-0.5b",
        generator="auto",
        seeds_path=efficacy.SEEDS,
        train_flags="--micro_train_batch_size 2 --gradient_checkpointing true --init_kl_coef 0",
    )
    return [
        *efficacy.train_flags(args),
        *efficacy.ARMS[RUNS[run]][1],
        "--steps",
        str(STEPS),
        "--collapse_guard",
        "watch",
        "--guard_every",
        str(EVERY),
        "--eval_data",
        str(efficacy.HELDOUT),
        "--eval_samples",
        str(HELDOUT),
        "--eval_steps",
        str(EVERY),
        "--save_steps",
        str(EVERY),
        "--max_ckpt_num",
        "1",
    ]


def keep_anchor(run_dir: Path, kept: Path) -> None:
    """Keep the run's anchor in items/anchors/, once, for any later run with the same probe."""
    if (run_dir / ANCHOR).is_file() and not kept.is_file():
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(run_dir / ANCHOR, kept)


def train(run: str, out: Path, resume: bool, s: Setting) -> None:
    probe, seed = s.probe, s.seed
    tag = name(run, s)
    run_dir = out / tag
    if run_dir.exists() and not resume:
        sys.exit(f"{run_dir} exists; add --resume to continue it, or choose another --out")
    kept = ANCHORS / f"probe{probe}_seed{seed}.jsonl"
    if run_dir.exists() and not any((run_dir / "checkpoints").glob("step_*/COMPLETE")):
        # stopped before its first checkpoint: start again, keeping the anchor it computed
        keep_anchor(run_dir, kept)
        shutil.rmtree(run_dir)
    # an anchor kept in items/ or --out for this probe (64 prompts x 8 samples: 11 min on AVX2)
    mine = [kept] if probe != 64 or seed != 42 else [kept, out / ANCHOR, *(out / n / ANCHOR for n in RUNS)]
    if probe == 512:  # the probe is the whole file whatever the seed, so any seed's anchor is this one's
        mine += sorted(ANCHORS.glob("probe512_seed*.jsonl"))
    anchor = next((p for p in mine if p.is_file()), None)
    args = (
        ["--resume", str(run_dir)]
        if run_dir.exists()
        else [
            *flags(run),
            *probe_flags(probe, seed),
            *setting_flags(s),
            *(["--guard_anchor", str(anchor)] if anchor else []),
            "--run_dir",
            str(run_dir),
        ]
    )
    env = {**os.environ, "MALLOC_ARENA_MAX": "2"}  # round two's memory setting (its arm c's OOM)
    r = subprocess.run([sys.executable, "-m", "serl.cli", "train", *args], cwd=ROOT, env=env)
    if anchor is None or anchor.parent != ANCHORS:  # a kept anchor is not kept twice
        keep_anchor(run_dir, kept)
    if r.returncode != 0:
        sys.exit(f"serl train failed ({r.returncode}) in {run_dir}; fix it and rerun with --resume")
    export(tag, run_dir, args)


def export(run: str, run_dir: Path, args: list[str] | None = None) -> None:
    """Copy the run's per-item files into items/<run>/ (also mid-run: what has been checked so far)."""
    dest = ITEMS / run
    dest.mkdir(parents=True, exist_ok=True)
    for name in KEEP:
        if (run_dir / name).is_file():
            shutil.copyfile(run_dir / name, dest / name)
    if args is None or args[:1] == ["--resume"]:  # mid-run or resumed: the config the run was started with
        args = yaml.safe_load((run_dir / "config.yaml").read_text())
    (dest / "flags.json").write_text(json.dumps(args, indent=1, default=str) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", nargs="?", choices=sorted(RUNS), help="which run to train")
    ap.add_argument("--out", default=str(ROOT / "runs" / "guard"), help="where the run directories go")
    ap.add_argument("--resume", action="store_true", help="continue the run in --out")
    ap.add_argument("--export", action="store_true", help="copy the named run's files to items/ as they are now")
    ap.add_argument("--table", action="store_true", help="rebuild real_runs.md from items/ and print it")
    ap.add_argument("--probe", type=int, default=64, choices=(64, 256, 512), help="probe size (256 or 512: with margin 0)")
    ap.add_argument("--seed", type=int, default=42, help="the run's seed (another one for a fresh run)")
    ap.add_argument("--every", type=int, default=EVERY, help="check the guard and evaluate held-out every N steps")
    ap.add_argument("--mode", default="watch", choices=("watch", "stop", "rollback"), help="what the guard may do")
    ap.add_argument("--lr_scale", type=float, default=0.5, help="rollback: the learning rate's factor at each rollback")
    ap.add_argument("--lr_floor", type=float, default=0.0, help="rollback: the cumulative factor's floor (0: none)")
    ap.add_argument("--steps", type=int, default=STEPS, help="optimizer steps of the run")
    a = ap.parse_args(argv)
    s = Setting(a.probe, a.seed, a.every, a.mode, a.lr_scale, a.lr_floor, a.steps)
    if a.run and a.export:
        tag = name(a.run, s)
        export(tag, Path(a.out) / tag)
    elif a.run:
        train(a.run, Path(a.out), a.resume, s)
    if a.table or a.run:
        from real_table import write_table  # noqa: PLC0415

        print(write_table(ITEMS, HERE / "real_runs.md"))
        try:
            from real_table import plot  # noqa: PLC0415

            plot(ITEMS, HERE / "real_runs.png")
        except ImportError as e:  # the tables need no matplotlib; the curves do
            print(f"real_runs.png not drawn: {e}", file=sys.stderr)
    if not (a.run or a.table):
        ap.error("name a run, or --table")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    raise SystemExit(main())
