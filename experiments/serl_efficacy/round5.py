"""The fifth round (issue 62): label-free SeRL with the options the training-data probe picks,
against seed labels and no training, 100 optimizer steps per arm, 600 held-out problems.

    python experiments/serl_efficacy/probe_round5.py                              # first: the task probe
    python experiments/serl_efficacy/round5.py --task TASK --out ../runs/round5              # start
    python experiments/serl_efficacy/round5.py --task TASK --out ../runs/round5 --resume     # after any stop
    python experiments/serl_efficacy/round5.py --smoke --out runs/round5_smoke               # SmolLM2, minutes
    python experiments/serl_efficacy/results_decide.py experiments/serl_efficacy/items/round5_TASK

Fixed here before any arm trains (README, "Fifth round"):
  d    no training, evaluated on every kind of machine an arm is evaluated on
  c    seed labels (rule reward); cut answers scored 0 (--stop_properly_penalty_coef 0), not masked
  a    SeRL (self-instruction + majority vote), cut answers scored 0, and the label-free options
       that ``pick_options`` reads off the task probe's kept items (training problems only);
       the collapse guard watching (issue 61 has not settled a setting that acts)
  a-   SeRL as in the fourth round (cut answers masked, no options), if time allows
Budget: --steps 100 optimizer steps per trained arm, whatever the machine; held-out greedy
pass@1 on 600 problems at steps 25, 50, 75, 90, 95 and 100 (the last three show checkpoint
jitter), SVAMP in full (1,000) at each arm's end. Every evaluation keeps its per-problem results,
the response texts and the sha256 of the evaluated policy in --items; the fourth round's driver
(decide.py) does the training, resuming and keeping, so a session that stops loses nothing.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import decide  # noqa: E402
from arms import ARMS  # noqa: E402

from run import TASK_FULL, TASK_SMOKE, log, machine, train_flags  # noqa: E402

PROBES = HERE / "items" / "probe5"
CUT_SCORED = ["--overlong_filter", "false", "--stop_properly_penalty_coef", "0"]
GUARD_WATCH = ["--collapse_guard", "watch", "--guard_every", "4"]
FULL = dict(TASK_FULL, steps=100, eval_every=25, extra_points=(90, 95), max_minutes=100000.0, heldout=600,
            transfer=1000, k=0, keep_texts=True)
SMOKE = dict(TASK_SMOKE, steps=4, eval_every=2, extra_points=(3,), max_minutes=10.0, guard_probe=8, k=0,
             keep_texts=True)
MASKS = (0.0, 0.375, 0.5, 0.625, 0.75)  # majority shares of 8 samples: none, 3, 4, 5, 6 of 8


def probe_items(task: str) -> list[dict]:
    """The task probe's per-problem outcomes (probe_round5.py); a union of step counts pools its parts."""
    parts = {"arith": ["arith"], "gsm8k_1to3": [1, 2, 3], "gsm8k_2to3": [2, 3], "gsm8k_2to4": [2, 3, 4],
             "gsm8k_3to4": [3, 4]}.get(task, [task])
    names = [p if isinstance(p, str) else f"gsm8k_{p}step" for p in parts]
    missing = [n for n in names if not (PROBES / f"{n}.json").is_file()]
    if missing:
        sys.exit(f"arm a's options are read off the task probe, and it has not run for {missing} "
                 f"(python experiments/serl_efficacy/probe_round5.py)")
    return [it for n in names for it in json.loads((PROBES / f"{n}.json").read_text())["items"]]


def pick_options(items: list[dict]) -> tuple[list[str], dict]:
    """Arm a's options, by a rule fixed before the probe ran:
    - the mask threshold s (CuMa, --min_majority_share) maximises, over MASKS, the vote's net
      signal per probe problem: (kept groups whose vote is right - kept groups whose vote is
      wrong) / problems; ties go to the lower s (more data);
    - agreement weighting (RESTRAIN, --agreement_weight_power 1) is on when the vote is right
      at least 10 points more often in groups with a clear majority (share >= 0.5) than below
      (and the probe has groups of both kinds)."""
    n = len(items)

    def net(s: float) -> float:
        kept = [it for it in items if it["vote"] is not None and it["share"] >= s - 1e-9]
        return (sum(bool(it["vote_ok"]) for it in kept) - sum(not it["vote_ok"] for it in kept)) / n

    scores = {s: net(s) for s in MASKS}
    best = max(MASKS, key=lambda s: (round(scores[s], 9), -s))
    clear = [it for it in items if it["vote"] is not None and it["share"] >= 0.5]
    other = [it for it in items if not (it["vote"] is not None and it["share"] >= 0.5)]
    acc = lambda xs: sum(bool(it["vote_ok"]) for it in xs) / len(xs) if xs else 0.0  # noqa: E731
    weight = bool(clear) and bool(other) and acc(clear) - acc(other) >= 0.10
    flags = (["--min_majority_share", str(best)] if best else []) + (["--agreement_weight_power", "1"] if weight
                                                                     else [])
    why = {"net_signal_by_mask": scores, "mask": best, "vote_right_clear": acc(clear), "vote_right_other": acc(other),
           "agreement_weight": weight, "probe_problems": n}
    return flags, why


def arms5(task: str, smoke: bool) -> tuple[dict, list[str], dict]:
    """The arms' flags, arm a's options, and why the probe picked them."""
    options, why = ([], {"smoke": "no probe: options off"}) if smoke else pick_options(probe_items(task))
    return {
        "c": ("rule reward, seed labels, cut answers scored 0", ARMS["c"][1] + CUT_SCORED),
        "a": ("SeRL, cut answers scored 0, the probe's options, guard watching",
              ARMS["a"][1] + CUT_SCORED + options + GUARD_WATCH),
        "a-": ("SeRL as in the fourth round (cut answers masked, no options), guard watching",
               ARMS["a"][1] + GUARD_WATCH),
        "d": ("no training", None),
    }, options, why


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="", help="the task the probe chose (tasks.TASKS); required unless --smoke")
    ap.add_argument("--out", required=True, help="the run's directory, outside the checkout (e.g. ../runs/round5)")
    ap.add_argument("--items", type=Path, default=None, help="kept per-problem results (default items/round5_TASK; "
                    "with --smoke, OUT/items)")
    ap.add_argument("--arms", default="c,a", help="training arms, in order (d is always evaluated first)")
    ap.add_argument("--resume", action="store_true", help="continue an existing --out")
    ap.add_argument("--smoke", action="store_true", help="SmolLM2, arithmetic and tiny sizes: the pipeline only")
    ap.add_argument("--generator", default="auto", choices=("auto", "vllm", "hf"))
    args = ap.parse_args(argv)
    from tasks import TASKS, write_task_files

    args.task = args.task or ("arith" if args.smoke else "")
    if args.task not in TASKS:
        sys.exit(f"--task: one of {', '.join(sorted(TASKS))} (the probe's choice; README, 'Fifth round')")
    sizes = SMOKE if args.smoke else FULL
    for key, v in sizes.items():
        setattr(args, key, v)
    args.items = args.items or (Path(args.out) / "items" if args.smoke else HERE / "items" / f"round5_{args.task}")
    args.model = "smollm2" if args.smoke else "qwen2.5-coder-0.5b"
    args.train_flags = " ".join(decide.STEP_FLAGS)
    args.task_flags = True  # LoRA, the boxed instruction the probe used, one-call self-instruction: every task
    if args.task == "arith" and not args.smoke:
        args.max_len = 128  # the arithmetic rounds' limit
    table, options, why = arms5(args.task, args.smoke)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if any(a not in table or a == "d" for a in arms):
        sys.exit(f"--arms takes a subset of c,a,a- (got {args.arms})")
    out = Path(args.out).resolve()
    if out.exists() and any(out.iterdir()) and not args.resume:
        sys.exit(f"{out} exists; add --resume to continue it, or choose another --out")
    decide.restore(args.items, out)
    files = write_task_files(args.task, out, args.seeds, args.heldout, args.transfer)
    args.seeds_path = files["seeds"]
    from serl.config.parser import parse_args

    flags = train_flags(args)
    for a in arms:  # bad flags fail here, before anything is written
        parse_args(flags + list(table[a][1]))
    cfg = parse_args(flags + table["c"][1])[0]
    settings = {k: getattr(args, k) for k in (*sizes, "model", "task", "train_flags", "smoke")}
    settings.update(arms={a: table[a][1] for a in arms}, options_why=why)
    setup = out / "setup.json"
    if setup.exists():
        saved = json.loads(setup.read_text())
        diff = {k: (saved["settings"].get(k), v) for k, v in json.loads(json.dumps(settings)).items()
                if saved["settings"].get(k) != v}
        if set(diff) - {"arms"}:
            sys.exit(f"{setup}: settings differ from this command's: {diff}; use another --out")
        saved["settings"]["arms"].update(settings["arms"])
        saved.setdefault("sessions", []).append(machine())
        setup.write_text(json.dumps(saved, indent=1))
    else:
        setup.write_text(json.dumps({"settings": settings, "machine": machine(), "sessions": [machine()]}, indent=1))
    args.items.mkdir(parents=True, exist_ok=True)
    log(f"round 5 on {args.task}: arms {arms}; arm a's options {options or 'none'} ({why})")

    base, ev, tev, timings = decide.start_evaluation(args, out, files, cfg, texts=True)
    for arm in arms:
        decide.run_arm(arm, args, out, flags, ev, tev, timings, base, arms=table)
    ev.close()
    tev.close()
    from results_decide import report

    print(report(args.items))
    return 0


if __name__ == "__main__":
    sys.exit(main())
