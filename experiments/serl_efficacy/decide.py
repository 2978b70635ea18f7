"""The deciding run (issue 49): SeRL against seed labels over hundreds of steps, guard acting.

    python experiments/serl_efficacy/decide.py --out ../runs/decide            # start
    python experiments/serl_efficacy/decide.py --out ../runs/decide --resume   # after any stop
    python experiments/serl_efficacy/decide.py --out ../runs/decide --resume --eval_latest a  # a stopped arm, now
    python experiments/serl_efficacy/decide.py --out ../runs/decide --resume --eval_latest a --eval_step 51
    python experiments/serl_efficacy/decide.py --smoke --out runs/decide_smoke # SmolLM2, minutes
    python experiments/serl_efficacy/results_decide.py experiments/serl_efficacy/items/decide

The third round's task, seeds, held-out set and model (GSM8K two-step, Qwen2.5-Coder-0.5B, LoRA
32), with the step of issue 46 (no KL term, vLLM graphs on, tcmalloc). Arms, one at a time:
  d   no training (evaluated on every kind of machine an arm is evaluated on)
  c   seed labels (rule reward)
  a   SeRL (self-instruction + majority vote) with the collapse guard acting (rollback)
  a0  SeRL with the guard watching only (what the guard changed), if time allows
Each trained arm runs to --steps optimizer steps or --max_minutes of training steps, whichever
comes first; every --eval_every steps its policy is evaluated (held-out greedy pass@1, cut share,
accuracy among finished answers); its end also gets maj@K and SVAMP. After every evaluation the
per-problem results (0/1 vectors and token counts, no text), the training metrics, the setup and
the timings are copied into --items (in the repository), so a session that stops loses nothing
that a number needs, and results_decide.py rebuilds every table from there alone.

Machines differ (bf16 kernels with and without AMX flip greedy answers), so every evaluation
records its machine kind and is paired only with arm d evaluated on the same kind.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from arms import ARMS  # noqa: E402
from export_items import export  # noqa: E402

from run import (  # noqa: E402
    ROOT,
    TASK_FULL,
    TASK_SMOKE,
    Timings,
    budget_used,
    check_eval_settings,
    guard_pick,
    log,
    machine,
    snapshot,
    train_flags,
)

TASK = "gsm8k_2step"
STEP_FLAGS = ["--init_kl_coef", "0", "--vllm_enforce_eager", "false"]  # issue 46 (bench/README.md)
# Fixed before arm a, from training signals only: in the third round arm a's probe agreement (a
# training signal) fell from 0.44 (step 6) to 0.27 (step 12), so a check every 4 steps sees such a
# fall within 4 steps; rollback, not stop, because one early dip must not end a 200-step arm;
# the guard's other settings are its defaults (docs/guard.md).
GUARD_ACT = ["--collapse_guard", "rollback", "--guard_every", "4", "--guard_max_rollbacks", "2"]
GUARD_WATCH = ["--collapse_guard", "watch", "--guard_every", "4"]
# The guard's rule as the design fixed it before any arm ran: every check at p < 0.05, one bad check
# fires. serl's default changed since (issue 61, docs/guard.md); arms a and a0 keep this one.
OLD_RULE = ["--guard_rule", "per_check", "--guard_patience", "1"]
ARMS4 = {
    "c": ("rule reward, seed labels", ARMS["c"][1]),
    "a": ("SeRL, guard acting (rollback)", ARMS["a"][1] + GUARD_ACT + OLD_RULE),
    "a0": ("SeRL, guard watching only", ARMS["a"][1] + GUARD_WATCH + OLD_RULE),
    "d": ("no training", None),
}
FULL = dict(TASK_FULL, steps=200, eval_every=25, max_minutes=300.0)
SMOKE = dict(TASK_SMOKE, steps=4, eval_every=2, max_minutes=10.0, guard_probe=8)
ANCHOR = "guard_anchor.jsonl"


def machine_kind() -> str:
    """intel-amx, amd-noamx (AVX-512), amd-avx2, ...: what decides whether two greedy evaluations can be
    paired (the kernels, and the precision --bf16/--generator_dtype auto picks: fp32 on AVX2-only CPUs)."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    vendor = "intel" if "GenuineIntel" in info else "amd" if "AuthenticAMD" in info else "other"
    kind = "amx" if " amx_bf16" in info else "noamx" if " avx512f" in info else "avx2"
    return f"{vendor}-{kind}"


def arm_state(run_dir: Path) -> tuple[int, float, bool]:
    """(last step, training minutes used, whether the guard stopped the run)."""
    if not (run_dir / "metrics.jsonl").exists():
        return 0, 0.0, False
    step, used = budget_used(run_dir)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return step, used, any(r.get("guard/action") == 2 for r in rows)


def train_to(arm: str, target: int, run_dir: Path, flags: list[str], args, timings: Timings) -> None:
    """Train ``run_dir`` up to step ``target`` (a new run, or --resume of the arm's run)."""
    limits = ["--steps", str(target), "--max_minutes", str(args.max_minutes)]
    from serl.run.checkpoint import latest_checkpoint

    # no checkpoint yet (a start killed before its first one leaves an empty metrics.jsonl): begin again
    new = latest_checkpoint(run_dir) is None
    cmd = [*flags, *limits, "--run_dir", str(run_dir)] if new else ["--resume", str(run_dir), *limits]
    if new and run_dir.exists():
        shutil.rmtree(run_dir)
    log(f"arm {arm}: serl train to step {target} ({'new' if new else 'resume'}), {machine_kind()}")
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "serl.cli", "train", *cmd], cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"serl train failed ({r.returncode}) in {run_dir}; fix it and rerun with --resume")
    step, used, stopped = arm_state(run_dir)
    timings.add("train", arm, {"to_step": target, "wall_s": time.perf_counter() - t0, "step": step,
                               "minutes_used": used, "guard_stopped": stopped, "machine": machine_kind()})


def policy_sha256(model: str) -> str:
    """sha256 over the evaluated policy's weight files (a merged adapter or a full model), in name order."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted(Path(model).glob("*.safetensors")):
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 24), b""):
                h.update(block)
    return h.hexdigest()


def evaluate(ev, tag: str, model: str, step: int, k: int, timings: Timings) -> dict:
    """One evaluation, tagged with the machine kind it ran on and the hash of the policy evaluated."""
    res = ev.evaluate(tag, model, step=step, k=k, timings=timings)
    if "machine" not in res or "policy_sha256" not in res:
        res["machine"] = res.get("machine") or machine_kind()
        res["policy_sha256"] = policy_sha256(model) if Path(model).is_dir() else ""
        path = ev.out / f"{tag}.json"
        path.write_text(json.dumps(res))
    return res


def evaluated(out: Path, tag: str, k: int) -> bool:
    path = out / "eval" / f"{tag}.json"
    return path.exists() and (not k or json.loads(path.read_text()).get("k") == k)


def keep(out: Path, items: Path, texts: bool = False) -> None:
    """Copy what every number needs into the repository (export_items.py's layout; ``texts``: with
    the response texts, as the fifth round keeps them)."""
    export(out, items, texts=texts)
    for res in (out / "eval").glob("*.json"):  # export keeps a fixed set of keys; add the machine kind and hash
        kept = items / "eval" / res.name
        data = json.loads(kept.read_text())
        full = json.loads(res.read_text())
        data["machine"] = full.get("machine", "")
        if full.get("policy_sha256"):
            data["policy_sha256"] = full["policy_sha256"]
        kept.write_text(json.dumps(data, separators=(",", ":")) + "\n")


def next_point(step: int, args) -> int:
    """The next evaluation step after ``step``: a multiple of --eval_every, or one of the extra points."""
    ahead = [p for p in getattr(args, "extra_points", ()) if p > step]
    return min(args.steps, (step // args.eval_every + 1) * args.eval_every, *ahead)


def run_arm(arm: str, args, out: Path, flags: list[str], ev, tev, timings: Timings, base: str, arms=None) -> None:
    arms = arms or ARMS4
    texts = bool(getattr(args, "keep_texts", False))
    run_dir = out / f"arm_{arm}"
    arm_flags = list(arms[arm][1]) + (["--guard_probe", str(args.guard_probe)] if "guard" in " ".join(arms[arm][1])
                                      else [])
    if "--collapse_guard" in arm_flags and (out / ANCHOR).exists():
        arm_flags += ["--guard_anchor", str(out / ANCHOR)]  # one anchor for a and a0 (same model, probe, seed)
    from serl.run.checkpoint import latest_checkpoint

    if arm_state(run_dir)[0] > 0 and latest_checkpoint(run_dir) is None:  # lost with a machine
        set_aside(arm, out, args.items)
    while True:
        step, used, stopped = arm_state(run_dir)
        done = step >= args.steps or used >= args.max_minutes or stopped
        if not done:
            target = next_point(step, args)
            train_to(arm, target, run_dir, flags + arm_flags, args, timings)
            if (run_dir / ANCHOR).exists() and not (out / ANCHOR).exists():
                shutil.copyfile(run_dir / ANCHOR, out / ANCHOR)
            before, (step, used, stopped) = step, arm_state(run_dir)
            done = step >= args.steps or used >= args.max_minutes or stopped
            if step <= before and not done:
                sys.exit(f"{run_dir}: serl train ended at step {step} without reaching {target}, the budget "
                         "or a guard stop; look at its log, then rerun with --resume")
        tag = f"{arm}_{step:03d}"
        if not evaluated(out, tag, args.k if done else 0) or (done and not evaluated(out, f"{tag}_svamp", 0)):
            dest = out / "policies" / tag
            if not dest.exists():
                snapshot(run_dir, dest, base)
            check_eval_settings(run_dir, ev.cfg)
            if done:  # arm d's maj@K on this machine, for the end's comparison
                evaluate(ev, f"d_{machine_kind()}", base, 0, args.k, timings)
            evaluate(ev, tag, str(dest), step, args.k if done else 0, timings)
            if done:
                evaluate(tev, f"{tag}_svamp", str(dest), step, 0, timings)
            keep(out, args.items, texts)
            shutil.rmtree(dest)  # a merged model is 1 GB; the evaluation is what is kept
        if done:
            break
    kept = guard_pick(run_dir, out / "policies" / f"{arm}_guard", base) if "watch" in arm_flags else None
    if kept is not None:  # watch mode: what stop would have ended the run with
        evaluate(ev, f"{arm}_guard", str(kept[0]), kept[1], 0, timings)
        evaluate(tev, f"{arm}_guard_svamp", str(kept[0]), kept[1], 0, timings)
        keep(out, args.items, texts)
    log(f"arm {arm}: done at step {step} ({used:.1f} training minutes{', the guard stopped it' if stopped else ''})")


def restore(items: Path, out: Path) -> None:
    """A new --out (the last machine's is gone) starts from what the repository kept: the setup,
    timings, evaluations and training metrics, so finished arms and evaluations are not redone
    and the kept files are added to, never overwritten with less. An arm without a checkpoint
    here starts again."""
    if (out / "setup.json").exists() or not (items / "setup.json").exists():
        return
    log(f"{out}: new; restoring the kept setup, timings, evaluations and metrics from {items}")
    (out / "eval").mkdir(parents=True, exist_ok=True)
    for src in [items / "setup.json", items / "timings.json", *(items / "eval").glob("*.json"),
                *items.glob("arm_*/metrics.jsonl")]:
        dest = out / src.relative_to(items)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)


def set_aside(arm: str, out: Path, items: Path) -> None:
    """Rename an arm's evaluations and metrics to ``{arm}-lostN`` (in --out and in the kept items)
    before the arm starts again, so the new run's curve never mixes with the lost one's."""
    n = 1
    while (items / f"arm_{arm}-lost{n}").exists():
        n += 1
    for root in (out, items):
        for res in (root / "eval").glob(f"{arm}_[0-9]*.json"):
            res.rename(res.with_name(f"{arm}-lost{n}_{res.name[len(arm) + 1:]}"))
        if (root / f"arm_{arm}" / "metrics.jsonl").exists():
            (root / f"arm_{arm}-lost{n}").mkdir(exist_ok=True)
            (root / f"arm_{arm}" / "metrics.jsonl").rename(root / f"arm_{arm}-lost{n}" / "metrics.jsonl")
            if root == items and not any((items / f"arm_{arm}").iterdir()):
                (items / f"arm_{arm}").rmdir()
    log(f"arm {arm}: its run directory has no checkpoint (lost with a machine?); its earlier points are kept "
        f"as {arm}-lost{n}_*, and it starts again")


def eval_latest(arm: str, out: Path, ev, timings: Timings, base: str, step: int = 0) -> None:
    """Held-out greedy of ``arm``'s newest complete checkpoint, or of ``step``'s (no serl process
    may be training it)."""
    from serl.run.checkpoint import latest_checkpoint

    run_dir = out / f"arm_{arm}"
    if not run_dir.is_dir() or latest_checkpoint(run_dir) is None:
        sys.exit(f"--eval_latest {arm}: {run_dir} has no complete checkpoint")
    from serl import ConfigError
    from serl.run.lock import lock_run_dir

    try:
        lock = lock_run_dir(run_dir, new=False)
    except ConfigError as e:  # a serl run is training it: stop that first (Ctrl-C once)
        sys.exit(f"--eval_latest {arm}: {e}")
    dest = out / "policies" / f"{arm}_latest"
    shutil.rmtree(dest, ignore_errors=True)
    try:
        step = snapshot(run_dir, dest, base, step)
    except FileNotFoundError as e:
        sys.exit(f"--eval_latest {arm} --eval_step {step}: {e}")
    check_eval_settings(run_dir, ev.cfg)
    evaluate(ev, f"{arm}_{step:03d}", str(dest), step, 0, timings)
    shutil.rmtree(dest)
    lock.release()


def start_evaluation(args, out: Path, files: dict, cfg, texts: bool = False):
    """The held-out and SVAMP evaluators, and arm d evaluated on this machine's kind (what every
    evaluation made here is paired with; maj@K is added when an arm ends here), kept at once."""
    from heldout import Evaluator

    from serl.data.seeds import read_seeds
    from serl.models.resolve import resolve_model

    base = resolve_model(args.model)
    ev = Evaluator(out / "eval", read_seeds(files["heldout"], "problem", "answer", limit=args.heldout), cfg,
                   args.generator, base)
    tev = Evaluator(out / "eval", read_seeds(files["transfer"], "problem", "answer"), cfg, args.generator, base)
    timings = Timings(out / "timings.json")
    kind = machine_kind()
    evaluate(ev, f"d_{kind}", base, 0, 0, timings)
    evaluate(tev, f"d_{kind}_svamp", base, 0, 0, timings)
    keep(out, args.items, texts)
    return base, ev, tev, timings


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the run's directory (run directories, evaluations); put it "
                    "outside the checkout, e.g. ../runs/decide")
    ap.add_argument("--items", type=Path, default=None,
                    help="where per-problem results, metrics, setup and timings are kept (in the repository; "
                    "default items/decide; with --smoke, OUT/items: a smoke run's numbers are not results)")
    ap.add_argument("--arms", default="c,a,a0", help="training arms, in order (d is always evaluated first)")
    ap.add_argument("--resume", action="store_true", help="continue an existing --out")
    ap.add_argument("--smoke", action="store_true", help="SmolLM2 and tiny sizes: proves the pipeline only")
    ap.add_argument("--generator", default="auto", choices=("auto", "vllm", "hf"))
    ap.add_argument("--eval_latest", default="", metavar="ARM",
                    help="evaluate ARM's newest checkpoint now (held-out greedy), keep it, and exit: an extra curve "
                    "point before a session's stop, for a run stopped between its --eval_every points")
    ap.add_argument("--eval_step", type=int, default=0, metavar="STEP",
                    help="with --eval_latest: that step's checkpoint instead of the newest (one the run still keeps, "
                    "e.g. the last update before the guard stopped the run and reloaded an earlier policy)")
    args = ap.parse_args(argv)
    if args.eval_step and not args.eval_latest:
        sys.exit("--eval_step needs --eval_latest ARM")
    sizes = SMOKE if args.smoke else FULL
    args.items = args.items or (Path(args.out) / "items" if args.smoke else HERE / "items" / "decide")
    for key, v in sizes.items():
        setattr(args, key, v)
    args.model = "smollm2" if args.smoke else "qwen2.5-coder-0.5b"
    args.task, args.train_flags = TASK, " ".join(STEP_FLAGS)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if any(a not in ARMS4 or a == "d" for a in arms):
        sys.exit(f"--arms takes a subset of c,a,a0 (got {args.arms})")
    out = Path(args.out).resolve()
    if out.exists() and any(out.iterdir()) and not args.resume:
        sys.exit(f"{out} exists; add --resume to continue it, or choose another --out")
    from tasks import write_task_files

    restore(args.items, out)
    files = write_task_files(TASK, out, args.seeds, args.heldout, args.transfer)
    args.seeds_path = files["seeds"]
    from serl.config.parser import parse_args

    flags = train_flags(args)
    for a in arms:  # bad flags fail here, before anything is written
        parse_args(flags + list(ARMS4[a][1]))
    cfg = parse_args(flags + ARMS["a"][1])[0]
    settings = {k: getattr(args, k) for k in (*sizes, "model", "task", "train_flags", "smoke")}
    settings.update(step_flags=STEP_FLAGS, guard_act=GUARD_ACT, guard_watch=GUARD_WATCH,
                    arms={a: ARMS4[a][1] for a in arms})
    setup = out / "setup.json"
    if setup.exists():
        saved = json.loads(setup.read_text())
        diff = {k: (saved["settings"].get(k), v) for k, v in settings.items() if saved["settings"].get(k) != v}
        if set(diff) - {"arms"}:
            sys.exit(f"{setup}: settings differ from this command's: {diff}; use another --out")
        saved["settings"]["arms"].update(settings["arms"])
        saved.setdefault("sessions", []).append(machine())
        setup.write_text(json.dumps(saved, indent=1))
    else:
        setup.write_text(json.dumps({"settings": settings, "machine": machine(), "sessions": [machine()]}, indent=1))
    args.items.mkdir(parents=True, exist_ok=True)

    base, ev, tev, timings = start_evaluation(args, out, files, cfg)
    if args.eval_latest:
        eval_latest(args.eval_latest, out, ev, timings, base, args.eval_step)
        keep(out, args.items)
        arms = []
    for arm in arms:
        run_arm(arm, args, out, flags, ev, tev, timings, base)
    ev.close()
    tev.close()
    from results_decide import report

    print(report(args.items))
    return 0


if __name__ == "__main__":
    sys.exit(main())
