"""Does label-free SeRL improve a model here? Four arms, one held-out set.

    python experiments/serl_efficacy/run.py              # the full experiment (README.md)
    python experiments/serl_efficacy/run.py --model qwen2.5-coder-0.5b --heldout 200 \
        --train_flags "--micro_train_batch_size 2 --gradient_checkpointing true --init_kl_coef 0"   # opt-in, 24 GiB
    python experiments/serl_efficacy/run.py --resume     # continue in the same --out directory
    python experiments/serl_efficacy/run.py --smoke --out runs/efficacy_smoke   # minutes, tiny sizes

Arms, all from one model (--model; the embedded SmolLM2-135M-Instruct by default) with the
same seed problems (dataset/arith_seed.jsonl), the same settings and the same wall-clock
budget of training steps (--minutes):
  a  SeRL: self-instruction + majority-vote reward, no labels
  b  majority-vote reward on the seed problems only (no self-instruction)
  c  rule reward with the seed labels: the upper reference
  d  no training
Each arm trains in --curve_points segments of equal budget (`serl train --max_minutes`, which
stops after the step that reaches it and counts across `--resume`); after each segment its
policy is copied to policies/ and evaluated (greedy), the last one also with maj@K. The
held-out problems (dataset/arith_efficacy_heldout.jsonl) are only evaluated, never trained on
or used to choose a setting: every setting is fixed below, before any run.

Everything lands in --out (default runs/serl_efficacy, or runs/serl_efficacy_<model>): run
directories, one JSON per evaluation, timings.json, results.md and curves.png (report.py). Every stage is skipped when
its output exists, so --resume redoes only what is missing.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's serl
sys.path.insert(0, str(Path(__file__).resolve().parent))

from arms import ARMS  # noqa: E402
from tasks import TASKS, write_task_files  # noqa: E402

SEEDS, HELDOUT = ROOT / "dataset/arith_seed.jsonl", ROOT / "dataset/arith_efficacy_heldout.jsonl"
QUICKSTART = ROOT / "configs/quickstart.yaml"  # its prompt and length settings were chosen by measurement
# A GSM8K task's prompt and limit, from the probe on training problems (README, "Third round"):
# serl's default instruction (serl eval's chat_boxed) at 384 tokens cuts 7% of greedy answers
# (16% at 320, 31% at 256); "Answer briefly, ..." was no shorter (230 against 250 tokens).
TASK_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
TASK_MAX_LEN = 384
# every arm of a GSM8K task (issue 31, part 1; bench/README.md, "One SeRL step of Qwen"):
# LoRA (the KL reference is the base with the adapter off), a 0.5 GiB KV cache, one engine
# call per self-instruction round, micro-batches of 4 (the update's activations at 384
# tokens); --save_merged: each segment ends with the adapter folded into full weights
# (model_merged/), which the evaluation serves
TASK_FLAGS = ["--lora_rank", "32", "--lora_alpha", "64", "--save_merged", "true", "--vllm_kv_cache_gib", "0.5",
              "--instruction_one_call", "true", "--micro_train_batch_size", "4",
              "--save_steps", "1"]  # a LoRA checkpoint is small; an interrupted run loses one step at most
GUARD_FLAGS = ["--collapse_guard", "watch"]  # arms a and b of a GSM8K task (issue 31, part 3)


# Fixed before any run, not tuned on anything: the quickstart's generation, filter and
# instruction settings (configs/quickstart.yaml), a larger batch, and a constant learning rate
# (warm-up 0, floor 1.0) because time, not a step count, ends each run. 5e-6 is the rate
# experiments/spin uses for this model; the quickstart's 2e-6 was sized for 3 steps. 30 minutes
# per arm (the issue allows 45) keeps the whole run near 3 hours (README, "Time estimate").
FULL = dict(minutes=30.0, curve_points=3, heldout=256, k=8, batch=8, n=8, max_len=128, temperature=0.8,
            lr=5e-6, instructions=12, few_shot=8, few_shot_batch=4, instruction_len=192, refill=2)
SMOKE = dict(minutes=0.5, curve_points=2, heldout=16, k=2, batch=2, n=2, max_len=32, temperature=0.8,
             lr=5e-6, instructions=2, few_shot=4, few_shot_batch=2, instruction_len=64, refill=1)
# Issue 31 (README, "Third round"): a GSM8K task chosen by probing training problems only
# (probe_task.py), with Qwen2.5-Coder-0.5B, LoRA and the collapse guard watching arms a and b.
# Fixed before any arm ran. The LoRA learning rate is 10x the full fine-tuning one
# (Schulman et al., "LoRA Without Regret", Thinking Machines, 2025: the best LoRA rate is
# about 10x FullFT's across their sweeps); nothing was tuned.
TASK_FULL = dict(FULL, minutes=60.0, curve_points=5, heldout=200, max_len=TASK_MAX_LEN, lr=5e-5, seeds=200,
                 transfer=300, guard_probe=64)
TASK_SMOKE = dict(SMOKE, seeds=32, transfer=16, guard_probe=8)
STEP_CAP = 100000  # --steps; the budget ends the run long before


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def length_flags() -> list[str]:
    """The quickstart's short-answer instruction and overlong filter (README, "What the
    quickstart does": 19% of answers cut at 128 tokens instead of 77%), read from its YAML so
    the two cannot drift apart."""
    import yaml

    q = yaml.safe_load(QUICKSTART.read_text())
    return ["--system_prompt", q["system_prompt"], "--overlong_filter", str(q["overlong_filter"]).lower()]


def task_length_flags() -> list[str]:
    """A GSM8K task's instruction (chosen by the probe, README "Third round") and the overlong
    filter (answers cut at the limit stay in the vote, out of the loss), as for arithmetic."""
    return ["--system_prompt", TASK_INSTRUCTION, "--overlong_filter", "true"]


def train_flags(args) -> list[str]:
    """The flags every training arm shares (the arm adds its own)."""
    task = args.task != "arith" or getattr(args, "task_flags", False)  # round 5: the GSM8K settings for arith too
    return [*(task_length_flags() if task else length_flags()), "--model", args.model, "--prompt_data", str(args.seeds_path), "--seed", "42", "--generator", args.generator,
            "--progress", "plain", "--save_model", "false", "--steps", str(STEP_CAP),
            "--save_steps", "5", "--max_ckpt_num", "2",
            "--rollout_batch_size", str(args.batch), "--n_samples_per_prompt", str(args.n),
            "--generate_max_len", str(args.max_len), "--temperature", str(args.temperature),
            "--instructions_num_per_iteration", str(args.instructions),
            "--few_shot_generation", str(args.few_shot), "--few_shot_generation_batch_size",
            str(args.few_shot_batch), "--instruction_max_len", str(args.instruction_len),
            "--max_refill_rounds", str(args.refill), "--reward_difficulty_bounds", "0.2", "0.8",
            "--advantage_estimator", "reinforce", "--init_kl_coef", "1e-4",
            "--actor_learning_rate", str(args.lr), "--lr_warmup_ratio", "0", "--min_lr_ratio", "1.0",
            "--micro_train_batch_size", "8", "--bf16", "auto", *(TASK_FLAGS if task else []),
            *shlex.split(args.train_flags)]


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    mem = next((line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")), "0") if Path("/proc/meminfo").exists() else "0"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "platform": platform.platform(), "cpu": cpu,
            "cores": len(os.sched_getaffinity(0)), "mem_gib": round(int(mem) / 2 ** 20, 1),
            "python": platform.python_version(), "commit": commit.stdout.strip(),
            "loadavg_at_start": os.getloadavg()}


class Timings:
    """timings.json: wall time of every training segment and evaluation, with the load average."""

    def __init__(self, path: Path):
        self.path = path
        self.data = json.loads(path.read_text()) if path.exists() else {"train": {}, "eval": {}}

    def add(self, kind: str, key: str, entry: dict) -> None:
        entry["loadavg"] = os.getloadavg()
        self.data[kind].setdefault(key, []).append(entry)
        self.path.write_text(json.dumps(self.data, indent=1))


def projection(timings: Timings, arms: list[str], minutes: float, points: int) -> str:
    """The whole experiment's length from this machine's timings so far: arm d's evaluation
    (a greedy-only point costs its engine start and greedy pass; an arm's last point adds the
    samples), and the training segments' time beyond their budget (start-up, checkpoints, the
    last step past the budget; 90 s each until one was measured)."""
    d = timings.data["eval"]["d"][-1]
    point = d["engine_start_s"] + d["greedy_s"]
    last = point + d.get("sample_s", 0.0)
    extra = [sum(e["wall_s"] for e in es if e["wall_s"] > 0) - 60 * es[-1]["to_minutes"]
             for es in timings.data["train"].values() if any(e["wall_s"] > 0 for e in es)]
    runs = [sum(e["wall_s"] > 0 for e in es) for es in timings.data["train"].values()]
    overhead = max(0.0, sum(extra) / max(1, sum(runs))) if extra else 90.0
    ev = last + len(arms) * ((points - 1) * point + last)
    tr = len(arms) * (60 * minutes + points * overhead)
    return (f"projected length of the whole experiment: {(ev + tr) / 3600:.1f} h (evaluation {ev / 60:.0f} min, "
            f"training {tr / 60:.0f} min with {overhead:.0f} s overhead per segment; load average now "
            f"{os.getloadavg()[0]:.1f})")


# ---- training ---------------------------------------------------------------------------
def budget_used(run_dir: Path) -> tuple[int, float]:
    """(last step, minutes of training steps used) of a run, from its metrics.jsonl."""
    from serl.run.hooks import BUDGET_KEY

    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    rows = [r for r in rows if BUDGET_KEY in r]
    return (rows[-1]["step"], rows[-1][BUDGET_KEY]) if rows else (0, 0.0)


def train_segment(arm: str, point: int, run_dir: Path, minutes: float, flags: list[str], timings: Timings) -> None:
    """Train ``run_dir`` until ``minutes`` of training steps in all (a new run or --resume)."""
    if run_dir.exists() and (run_dir / "metrics.jsonl").exists():
        step, used = budget_used(run_dir)
        if used >= minutes:  # the last step of an earlier segment went past this one's end too
            log(f"arm {arm}: {used:.2f} min used by step {step} already cover {minutes:g} min")
            timings.add("train", arm, {"point": point, "to_minutes": minutes, "wall_s": 0.0, "step": step,
                                       "minutes_used": used})
            return
    args = (["--resume", str(run_dir), "--max_minutes", str(minutes)] if run_dir.exists()
            else [*flags, "--max_minutes", str(minutes), "--run_dir", str(run_dir)])
    log(f"arm {arm}: serl train to {minutes:g} min of training steps ({'resume' if run_dir.exists() else 'new'})")
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "serl.cli", "train", *args], cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"serl train failed ({r.returncode}) in {run_dir}; fix it and rerun with --resume")
    step, used = budget_used(run_dir)
    if used < minutes and step < STEP_CAP:
        sys.exit(f"{run_dir}: stopped at step {step} after {used:.2f} of {minutes:g} min; expected the budget")
    timings.add("train", arm, {"point": point, "to_minutes": minutes, "wall_s": time.perf_counter() - t0, "step": step,
                               "minutes_used": used})


EVAL_FIELDS = ("system_prompt", "generate_max_len", "temperature", "top_p")


def check_eval_settings(run_dir: Path, cfg) -> None:
    """The evaluation must use the prompt, token limit and sampling the arm trained with."""
    from serl.config.parser import parse_args

    saved = parse_args(["--config", str(run_dir / "config.yaml")])[0]
    bad = {f: (getattr(saved, f), getattr(cfg, f)) for f in EVAL_FIELDS if getattr(saved, f) != getattr(cfg, f)}
    if bad:
        sys.exit(f"{run_dir} trained with other settings than the evaluation uses (trained, evaluated): {bad}")


def same_evaluation(args, old_train_flags: str, cfg) -> bool:
    """Whether extra flags changed before any arm trained leave the evaluation (prompt, token
    limit, sampling) as it was, so arm d's cached result still holds."""
    from serl.config.parser import parse_args

    old = parse_args(train_flags(argparse.Namespace(**{**vars(args), "train_flags": old_train_flags}))
                     + ARMS["a"][1])[0]
    return all(getattr(old, f) == getattr(cfg, f) for f in EVAL_FIELDS)


def snapshot(run_dir: Path, dest: Path, base: str, step: int = 0) -> int:
    """The policy (weights and tokenizer, no optimizer) of the newest checkpoint, or of ``step``'s,
    in ``dest``; under LoRA merged into ``base``: the segment's own merged model when it is that step's."""
    from serl.run.checkpoint import DONE, checkpoint_dir, latest_checkpoint

    newest = latest_checkpoint(run_dir)
    ckpt = checkpoint_dir(run_dir, step) if step else newest
    if ckpt is None or not (ckpt / DONE).exists():
        raise FileNotFoundError(f"{ckpt or run_dir}: no complete checkpoint to evaluate")
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    merged = run_dir / "model_merged"
    # the merged model is the step of the segment that wrote it; a later checkpoint (a run
    # stopped mid-segment, or evaluated while it runs) or an earlier one is merged here from its adapter
    mtime = lambda d: max((f.stat().st_mtime for f in d.iterdir()), default=0.0)  # noqa: E731
    if ckpt == newest and merged.is_dir() and mtime(merged) >= mtime(ckpt):
        shutil.copytree(merged, tmp)
    elif (ckpt / "policy" / "adapter_config.json").exists():
        from serl.engines.lora import merge_saved_adapter

        merge_saved_adapter(ckpt / "policy", base, tmp)
    else:
        shutil.copytree(ckpt / "policy", tmp, ignore=shutil.ignore_patterns("learner_state.pt"))
    step = int(ckpt.name.split("_")[1])
    (tmp / "STEP").write_text(f"{step}\n")
    tmp.rename(dest)
    return step


ANCHOR = "guard_anchor.jsonl"  # serl.run.guard's file: the untrained model's vote on the probe


def arm_flags(args, arm: str, out: Path) -> list[str]:
    """The arm's own flags; on a GSM8K task arms a and b also run the collapse guard in watch
    mode, sharing one anchor (the first guarded arm computes it; same model, probe and seed)."""
    flags = list(ARMS[arm][1])
    if args.task != "arith" and arm in ("a", "b"):
        flags += [*GUARD_FLAGS, "--guard_probe", str(args.guard_probe)]
        if (out / ANCHOR).exists():
            flags += ["--guard_anchor", str(out / ANCHOR)]
    return flags


def share_anchor(run_dir: Path, out: Path) -> None:
    if (run_dir / ANCHOR).exists() and not (out / ANCHOR).exists():
        shutil.copyfile(run_dir / ANCHOR, out / ANCHOR)


def guard_fired(run_dir: Path) -> int | None:
    """The step at which the guard (watch mode) fired, from metrics.jsonl; None if never."""
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return next((r["step"] for r in rows if r.get("guard/fired")), None)


def guard_pick(run_dir: Path, dest: Path, base: str):
    """(policy, step) the collapse guard kept when it fired in watch mode: what ``stop`` mode
    would have ended the run with; None when it never fired (``stop`` = the arm's own end).
    Under LoRA the kept adapter is folded into the base here, for the engine to serve."""
    from serl.run.guard import BEST_DIR, BEST_META

    if guard_fired(run_dir) is None:
        return None
    if not dest.exists():
        src = run_dir / BEST_DIR
        step = json.loads((src / BEST_META).read_text())["step"]
        tmp = dest.with_name(dest.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        if (src / "adapter_config.json").exists():
            from serl.engines.lora import merge_saved_adapter

            merge_saved_adapter(src, base, tmp)
        else:
            shutil.copytree(src, tmp)
        (tmp / "STEP").write_text(f"{step}\n")
        tmp.rename(dest)
    return dest, int((dest / "STEP").read_text())


# ---- the experiment -----------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2", help="the model every arm starts from: 'smollm2' (embedded) or "
                    "an opt-in one such as 'qwen2.5-coder-0.5b' (serl/models/parts.py)")
    ap.add_argument("--out", help="output directory (default runs/serl_efficacy; runs/serl_efficacy_<model> "
                    "for another --model)")
    ap.add_argument("--task", default="arith", choices=("arith", *sorted(TASKS)),
                    help="arith: the shipped arithmetic seeds (first and second rounds); a GSM8K task: issue 31's "
                         "third round (tasks.py), with SVAMP as the transfer benchmark")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: minutes, proves the pipeline only")
    ap.add_argument("--resume", action="store_true", help="continue in an existing --out directory")
    ap.add_argument("--generator", default="auto", choices=("auto", "vllm", "hf"))
    ap.add_argument("--arms", default="a,b,c", help="training arms to run (d, no training, always is)")
    ap.add_argument("--minutes", type=float, help="wall-clock budget of training steps per arm "
                    f"(default {FULL['minutes']:g}; smoke {SMOKE['minutes']:g})")
    ap.add_argument("--curve_points", type=int, help="evaluated checkpoints per arm, at equal shares of the budget "
                    f"(default {FULL['curve_points']}; smoke {SMOKE['curve_points']})")
    ap.add_argument("--heldout", type=int, help=f"held-out problems (default {FULL['heldout']})")
    ap.add_argument("--k", type=int, help=f"samples for maj@K at each arm's end (default {FULL['k']})")
    ap.add_argument("--train_flags", default="", help="extra `serl train` flags for every training arm "
                    "(recorded in results.md); they must not differ between arms")
    args = ap.parse_args(argv)
    sizes = {(False, False): FULL, (True, False): SMOKE, (False, True): TASK_FULL, (True, True): TASK_SMOKE}
    for key, v in sizes[args.smoke, args.task != "arith"].items():
        if getattr(args, key, None) is None:
            setattr(args, key, v)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    bad = [a for a in arms if a not in ARMS or a == "d"]
    if bad or args.curve_points < 1 or args.minutes <= 0:
        sys.exit(f"--arms takes a subset of a,b,c (got {bad}); --curve_points >= 1; --minutes > 0")
    if args.out is None:
        args.out = str(ROOT / "runs" / ("serl_efficacy" if args.model == "smollm2" else f"serl_efficacy_{args.model}"))
        if args.task != "arith":
            args.out += f"_{args.task}"
    out = Path(args.out)
    if out.exists() and any(out.iterdir()) and not args.resume:
        sys.exit(f"{out} exists; add --resume to continue it, or choose another --out")
    files = {"seeds": SEEDS, "heldout": HELDOUT}
    if args.task != "arith":
        files = write_task_files(args.task, out, args.seeds, args.heldout, args.transfer)
    args.seeds_path = files["seeds"]

    from serl.config.parser import parse_args
    from serl.data.seeds import read_seeds

    flags = train_flags(args)
    for a in arms:  # bad flags fail here, before anything is written
        parse_args(flags + arm_flags(args, a, out))
    cfg = parse_args(flags + ARMS["a"][1])[0]  # prompt, token limit and sampling of the evaluation
    settings = {k: getattr(args, k) for k in (*sizes[args.smoke, args.task != "arith"], "model", "generator",
                                               "train_flags", "smoke")}
    if args.task != "arith":
        settings.update(task=args.task, instruction=TASK_INSTRUCTION, task_flags=TASK_FLAGS, guard_flags=GUARD_FLAGS)
    out.mkdir(parents=True, exist_ok=True)
    setup = out / "setup.json"
    if setup.exists():  # a resume continues the same experiment, never a changed one
        saved = json.loads(setup.read_text())
        saved["settings"].setdefault("model", "smollm2")  # recorded since --model exists
        diff = {k: (saved["settings"].get(k), v) for k, v in settings.items() if saved["settings"].get(k) != v}
        if diff and set(diff) <= {"minutes", "curve_points", "train_flags"} and not list(out.glob("arm_*")) \
                and same_evaluation(args, saved["settings"]["train_flags"], cfg):
            # e.g. after the projection printed under arm d, or a first step that ran out of memory
            log(f"no arm has trained yet: settings now {settings}; arm d's evaluation still holds")
            saved.setdefault("changed_before_training", []).append({"from": saved["settings"], "to": settings})
            saved["settings"] = settings
            setup.write_text(json.dumps(saved, indent=1))
        elif diff:
            sys.exit(f"{setup}: settings differ from this command's: {diff}; use another --out")
    else:
        setup.write_text(json.dumps({"settings": settings, "machine": machine()}, indent=1))

    from heldout import Evaluator

    heldout = read_seeds(files["heldout"], "problem", "answer", limit=args.heldout)
    from serl.models.resolve import resolve_model

    base = resolve_model(args.model)
    ev = Evaluator(out / "eval", heldout, cfg, args.generator, base)
    timings = Timings(out / "timings.json")
    t_start = time.perf_counter()
    ev.evaluate("d", base, step=0, k=args.k, timings=timings)
    tev = None
    if args.task != "arith":  # the transfer benchmark: untrained, and each arm's end (and its guard's pick)
        tev = Evaluator(out / "eval", read_seeds(files["transfer"], "problem", "answer"), cfg, args.generator, base)
        tev.evaluate("d_svamp", base, step=0, k=0, timings=timings)
    log(projection(timings, arms, args.minutes, args.curve_points))
    for arm in arms:
        run_dir = out / f"arm_{arm}"
        for i in range(1, args.curve_points + 1):
            dest = out / "policies" / f"{arm}_{i}"
            if not dest.exists():
                train_segment(arm, i, run_dir, round(args.minutes * i / args.curve_points, 4),
                              flags + arm_flags(args, arm, out), timings)
                share_anchor(run_dir, out)
                snapshot(run_dir, dest, base)
                log(projection(timings, arms, args.minutes, args.curve_points))
            step = int((dest / "STEP").read_text())
            check_eval_settings(run_dir, cfg)
            ev.evaluate(f"{arm}_{i}", str(dest), step=step, k=args.k if i == args.curve_points else 0,
                        timings=timings)
        if tev is not None:
            tev.evaluate(f"{arm}_{args.curve_points}_svamp", str(dest), step=step, k=0, timings=timings)
            kept = guard_pick(run_dir, out / "policies" / f"{arm}_guard", base)
            if kept is not None:  # what --collapse_guard stop would have ended with
                ev.evaluate(f"{arm}_guard", str(kept[0]), step=kept[1], k=0, timings=timings)
                tev.evaluate(f"{arm}_guard_svamp", str(kept[0]), step=kept[1], k=0, timings=timings)
    ev.close()
    if tev is not None:
        tev.close()
    if args.task != "arith":
        from results_task import report
    else:
        from results import report

    text = report(out, arms, args.curve_points, ARMS)
    print(text)
    log(f"done in {(time.perf_counter() - t_start) / 60:.1f} min: {out / 'results.md'}, {out / 'curves.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
