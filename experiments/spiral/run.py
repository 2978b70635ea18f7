"""SPIRAL on Kuhn Poker with the embedded model: RAE + population vs a control with RAE off.

One command (from the repository root):

    .venv/bin/python experiments/spiral/run.py                 # the measured result (12 steps x 32 games)
    .venv/bin/python experiments/spiral/run.py --resume        # continue unfinished arms after a stop
    .venv/bin/python experiments/spiral/run.py --smoke         # FULL steps and evaluations, twice: an estimate

Each arm is one `serl train --recipe spiral` run that evaluates itself before training, every
--eval_every steps and at the end: chips per game and win rate against uniform random over --eval_games
Kuhn hands (seats alternated, the same deals at every evaluation, 95% intervals), the invalid-move rate
under the parser used (--action_parser, lenient by default here) and under upstream's strict parser
(the same moves re-read), and the exploitability of the policy estimated from --exploit_samples samples
per info state. The arms differ only in --rae (on: role baselines, EMA 0.95; off: the step's mean return
as the baseline). The table (results.md), results.json and the curves (PNG) go to --out; each arm's wall
and CPU time go to timing.json, and --smoke prints what the FULL run would take on this machine.

The stronger-model plan (issue 33; README, "Plan for the Qwen run"): any --model but the embedded
one, or --plan stronger, runs stronger.py's stages instead: the probe that fixes the token limit
and the parser, the two training arms on Kuhn Poker and TicTacToe with LoRA, then paired games,
exploitability with intervals and math transfer for θ0 (the no-training arm) and both arms.

    .venv/bin/python experiments/spiral/run.py --model qwen2.5-coder-0.5b            # runs/spiral_qwen2.5-coder-0.5b
    .venv/bin/python experiments/spiral/run.py --model qwen2.5-coder-0.5b --resume   # after a stop
    .venv/bin/python experiments/spiral/run.py --plan stronger --smoke --generator hf --out runs/spiral_stronger_smoke

The second Qwen plan (README, "Second Qwen plan"): the same stages, a probe that also chooses the
instruction, and a KL term to θ0 in the loss.

    .venv/bin/python experiments/spiral/run.py --model qwen2.5-coder-0.5b --plan stronger2 [--resume]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLANS = ("auto", "round1", "stronger", "stronger2")
ARMS = {"rae_population": ["--rae", "true"], "control_no_rae": ["--rae", "false"]}
# The measured run. Trimmed to fit ~45 min per arm on an idle 2-core machine (README, "Cost"): one PPO
# epoch (upstream: 2), bf16 autocast in the learner, 64 new tokens, a population of 3 (fewer weight
# swaps per round), 12 samples per info state.
FULL = dict(steps=12, games_per_step=32, eval_every=6, eval_games=400, exploit_samples=12, generate_max_len=64,
            population_size=3, population_every=3, ppo_epochs=1, save_steps=3)
# --smoke: the FULL step (games, tokens, epochs, generator) twice and the FULL evaluation at steps 0 and 2,
# a snapshot after every step, so that the estimate needs no scaling of batch sizes.
SMOKE = dict(steps=2, eval_every=2, population_every=1, save_steps=1)


def parse(argv=None) -> argparse.Namespace:
    import stronger

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--model", default="smollm2")
    pre.add_argument("--plan", default="auto", choices=PLANS)
    pre.add_argument("--smoke", action="store_true")
    known = pre.parse_known_args(argv)[0]
    plan = known.plan if known.plan != "auto" else ("round1" if known.model == "smollm2" else "stronger")
    post = stronger.POST2 if plan == "stronger2" else stronger.POST
    full = FULL if plan == "round1" else {**stronger.FULL, **(stronger.POST_SMOKE if known.smoke else post)}
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2", help="the model every arm starts from (smollm2: the embedded "
                   "SmolLM2-135M; an opt-in one such as qwen2.5-coder-0.5b runs the stronger plan)")
    p.add_argument("--plan", default="auto", choices=PLANS,
                   help="round1: the measured SmolLM2 experiment; stronger: issue 33's (probe, LoRA, two games, "
                        "paired evaluations, math transfer); stronger2: its second plan (the probe also chooses "
                        "the instruction; KL to θ0); auto: round1 for smollm2, stronger otherwise")
    p.add_argument("--out", default=None, help="folder of the runs and the results (default runs/spiral_experiment; "
                   "stronger plan: runs/spiral_<model>; stronger2: runs/spiral2_<model>)")
    p.add_argument("--resume", action="store_true", help="continue arms whose run directory exists")
    p.add_argument("--smoke", action="store_true", help="the FULL step and evaluation twice, and a time estimate "
                   "(stronger plan: every stage at tiny sizes)")
    arms = ARMS if plan == "round1" else {**ARMS, "no_training": None}
    p.add_argument("--arms", default=",".join(arms), help=f"comma-separated arms to run: {', '.join(arms)}")
    p.add_argument("--games", default="kuhn_poker" if plan == "round1" else stronger.GAMES)
    for name, value in full.items():
        if name != "generate_max_len":
            p.add_argument(f"--{name}", type=type(value), default=value)
    p.add_argument("--lr", type=float, default=1e-5 if plan == "round1" else stronger.LR)
    p.add_argument("--bf16", default="auto", choices=("auto", "true", "false"),
                   help="bf16 in the learner: auto (where the CPU computes it natively, else fp32), true, false")
    p.add_argument("--generator", default="auto", help="auto (vLLM when installed), vllm or hf")
    p.add_argument("--generate_max_len", type=int, default=FULL["generate_max_len"] if plan == "round1" else 0,
                   help="new tokens per move (stronger plan: 0 = the probe's choice)")
    p.add_argument("--action_parser", default="mention" if plan == "round1" else "",
                   choices=("", "strict", "lenient", "mention"),
                   help="how a response becomes a move; mention (default here): SmolLM2 never uses the box "
                        "at step 0 (README), so the legal action it names last is taken; the strict rate "
                        "is reported as well (stronger plan: '' = the probe's choice)")
    if plan == "stronger2":
        p.add_argument("--kl_coef", type=float, default=stronger.KL2_COEF, help="β of the KL term to θ0 (k3, loss)")
    p.add_argument("--export", default="", help="stronger plan: copy per-item results (no text) to this folder")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    a.plan = plan
    a.arms = [x.strip() for x in a.arms.split(",") if x.strip()]
    if not a.arms or set(a.arms) - set(arms):
        p.error(f"--arms: choose among {', '.join(arms)}")
    if a.out is None:
        a.out = {"round1": "runs/spiral_experiment", "stronger": f"runs/spiral_{a.model}"}.get(
            plan, f"runs/spiral2_{a.model}")
    if a.smoke and plan == "round1":
        a.full = {k: getattr(a, k) for k in FULL}  # what the estimate scales to
        for k, v in SMOKE.items():
            setattr(a, k, v)
    elif a.smoke:
        for k, v in stronger.SMOKE.items():
            setattr(a, k, v)
    return a


def train_args(a, run_dir: Path, arm: list[str]) -> list[str]:
    if a.plan != "round1":
        import stronger

        extra = ["--model", a.model, *stronger.TRAIN_FLAGS, "--system_prompt", a.system_prompt]
        extra += [*stronger.KL2, "--init_kl_coef", str(a.kl_coef)] if a.plan == "stronger2" else []
    else:  # SmolLM2 runs past the limit in ~90% of its answers (README)
        extra = ["--mask_truncated", "false", "--micro_train_batch_size", "4"]  # 4: ~1 GB less at the peak than 8
    return ["--recipe", "spiral", "--run_dir", str(run_dir), "--games", a.games, "--kuhn_rules", "standard",
            "--opponent", "population", "--population_size", str(a.population_size),
            "--population_every", str(a.population_every), "--games_per_step", str(a.games_per_step),
            "--steps", str(a.steps), "--generate_max_len", str(a.generate_max_len), "--actor_learning_rate", str(a.lr),
            "--ppo_epochs", str(a.ppo_epochs), "--bf16", a.bf16,
            "--eval_steps", str(a.eval_every), "--eval_games", str(a.eval_games),
            "--exploit_samples", str(a.exploit_samples), "--generator", a.generator, "--action_parser", a.action_parser,
            "--save_steps", str(a.save_steps), "--max_ckpt_num", "1", "--save_model", "false", "--seed", str(a.seed),
            "--progress", "plain", *extra, *arm]


def run_arm(a, name: str, arm: list[str]) -> Path:
    run_dir = Path(a.out) / name
    done = run_dir / "report" / "summary.md"
    if a.resume and done.is_file():
        print(f"{name}: finished earlier, kept", flush=True)
        return run_dir
    if a.resume and (run_dir / "config.yaml").is_file():
        cmd = ["train", "--resume", str(run_dir)]
    else:
        if run_dir.exists() and any(run_dir.iterdir()):
            sys.exit(f"{run_dir} exists: pass --resume to continue it, or choose another --out")
        cmd = ["train", *train_args(a, run_dir, arm)]
    print(f"{name}: serl {' '.join(cmd)}", flush=True)
    wall, cpu = time.time(), cpu_seconds()
    code = train(cmd)
    timing = {"wall_s": round(time.time() - wall, 1), "cpu_s": round(cpu_seconds() - cpu, 1), "command": cmd[:3],
              # the largest resident set of any finished child process so far (Linux: KiB), not their sum
              "max_child_rss_gib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2 ** 20, 2)}
    with open(run_dir / "timing.jsonl", "a") as f:  # one line per (re)start of the arm
        f.write(json.dumps(timing) + "\n")
    if code:
        sys.exit(f"{name}: serl train exited with {code}; rerun with --resume to continue")
    return run_dir


def train(cmd: list[str]) -> int:
    """Run `serl train` in its own process group, and end the group afterwards: a run killed from outside
    (OOM, kill -9) leaves its vLLM engine processes behind, holding gigabytes, otherwise."""
    p = subprocess.Popen([sys.executable, "-m", "serl.cli", *cmd], cwd=ROOT, start_new_session=True)
    try:
        return p.wait()
    except KeyboardInterrupt:  # Ctrl-C reaches only this process now: pass it on
        os.killpg(p.pid, signal.SIGINT)
        return p.wait()
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def cpu_seconds() -> float:
    """CPU time of the finished child processes (serl train and the engines it started)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def evals(run_dir: Path) -> dict[int, dict]:
    """Evaluation rows of metrics.jsonl by step (the rows that carry eval/ keys)."""
    out: dict[int, dict] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        ev = {k.removeprefix("eval/kuhn_poker/"): v for k, v in row.items() if k.startswith("eval/kuhn_poker/")}
        if ev:
            out.setdefault(row["step"], {}).update(ev)
    return out


def estimate(a, run_dir: Path) -> str:
    """The FULL arm's time on this machine, scaled from a --smoke run: start-up and checkpoints as measured,
    steps by count, evaluations by their number of generated answers (~1.5 learner moves per hand)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    step_s = [r["time/step"] for r in rows if "time/step" in r]
    eval_s = [r["time/eval"] for r in rows if "time/eval" in r]
    timing = [json.loads(line) for line in (run_dir / "timing.jsonl").read_text().splitlines()]
    wall = sum(t["wall_s"] for t in timing)
    other = wall - sum(step_s) - sum(eval_s)
    full = a.full
    gens = lambda games, k: 1.5 * games + 12 * k  # noqa: E731
    n_evals = 1 + full["steps"] // full["eval_every"] + bool(full["steps"] % full["eval_every"])
    est = (other + full["steps"] * sum(step_s) / len(step_s)
           + n_evals * sum(eval_s) / len(eval_s) * gens(full["eval_games"], full["exploit_samples"])
           / gens(a.eval_games, a.exploit_samples))
    cpu = sum(t["cpu_s"] for t in timing)
    return (f"{run_dir.name}: smoke wall {wall / 60:.1f} min, CPU {cpu / 60:.1f} min: start-up and checkpoints "
            f"{other:.0f} s, {sum(step_s) / len(step_s):.0f} s per step, {sum(eval_s) / len(eval_s):.0f} s per "
            f"evaluation (wall) -> FULL arm about {est / 60:.0f} min wall on this machine as loaded now, "
            f"{est * cpu / wall / 60:.0f} min of CPU (the wall time on one idle core)")


def table(results: dict[str, dict[int, dict]]) -> str:
    lines = ["| arm | step | exploitability (chips/hand) | chips/game vs random [95% CI] | win rate vs random "
             "[95% CI] | invalid-move rate | strict parser |", "|---|---|---|---|---|---|---|"]
    for arm, by_step in results.items():
        for step, e in sorted(by_step.items()):
            g = lambda k, e=e: e.get(k, float("nan"))  # noqa: E731
            lines.append(f"| {arm} | {step} | {g('exploitability'):.3f} | {g('vs_random/payoff'):+.3f} "
                         f"[{g('vs_random/payoff_lo'):+.3f}, {g('vs_random/payoff_hi'):+.3f}] | "
                         f"{g('vs_random/win_rate'):.3f} [{g('vs_random/win_lo'):.3f}, {g('vs_random/win_hi'):.3f}] | "
                         f"{g('vs_random/invalid_rate'):.3f} | {g('vs_random/invalid_rate_strict'):.3f} |")
    return "\n".join(lines)


def plot(results: dict[str, dict[int, dict]], out: Path,
         title: str = "SPIRAL on Kuhn Poker (SmolLM2-135M): RAE + population vs RAE off") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("exploitability", "exploitability (chips/hand)", None),
              ("vs_random/payoff", "chips/game vs random", ("vs_random/payoff_lo", "vs_random/payoff_hi")),
              ("vs_random/invalid_rate", "invalid-move rate (strict parser dotted)", None)]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), layout="constrained")
    for ax, (key, label, band) in zip(axes, panels):
        for arm, by_step in results.items():
            steps = sorted(s for s in by_step if key in by_step[s])
            ax.plot(steps, [by_step[s][key] for s in steps], marker="o", label=arm)
            if key == "vs_random/invalid_rate":
                strict = [s for s in steps if "vs_random/invalid_rate_strict" in by_step[s]]
                ax.plot(strict, [by_step[s]["vs_random/invalid_rate_strict"] for s in strict], linestyle=":",
                        color=ax.lines[-1].get_color())
            if band:
                ax.fill_between(steps, [by_step[s][band[0]] for s in steps], [by_step[s][band[1]] for s in steps],
                                alpha=0.2)
        ax.set_xlabel("training step")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend()
    axes[0].axhline(11 / 24, color="grey", linestyle=":", linewidth=1)  # uniform random
    axes[1].axhline(0, color="grey", linestyle=":", linewidth=1)
    fig.suptitle(title)
    fig.savefig(out / "curves.png", dpi=110)


def main_stronger(a) -> int:
    """The stronger-model plan (stronger.py's module doc): probe, arms, paired evaluations, report."""
    import stronger

    out = Path(a.out)
    if out.exists() and any(out.iterdir()) and not a.resume:
        sys.exit(f"{out} exists: pass --resume to continue it, or choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    fixed = stronger.probe_stage(a, out)
    a.generate_max_len, a.action_parser = fixed["generate_max_len"], fixed["action_parser"]
    a.system_prompt = fixed["system_prompt"]
    settings = {k: v for k, v in vars(a).items() if k not in ("resume", "export", "out", "full")
                and not (k == "system_prompt" and not v)}  # the first plan's setup.json has no such key
    setup = out / "setup.json"
    if setup.exists():  # a resume continues the same experiment, never a changed one
        saved = json.loads(setup.read_text())["settings"]
        diff = {k: (saved.get(k), v) for k, v in settings.items() if saved.get(k) != v and k != "arms"}
        if diff:
            sys.exit(f"{setup}: settings differ from this command's: {diff}; use another --out")
    else:
        setup.write_text(json.dumps({"settings": settings, "probe_override": fixed["overridden"],
                                     "date": time.strftime("%Y-%m-%d %H:%M %Z"), "cores": os.cpu_count()},
                                    indent=1) + "\n")
    stronger.log(stronger.projection(json.loads((out / "probe.json").read_text()), a))
    trained = [x for x in a.arms if x in ARMS]
    for name in trained:
        run_arm(a, name, ARMS[name])
    post = stronger.post_stages(a, out, a.arms)
    print(stronger.report(a, out, post, settings))
    if trained:
        results = {name: evals(out / name) for name in trained}
        plot(results, out, title=f"SPIRAL on Kuhn Poker ({a.model}): RAE + population vs RAE off")
        stronger.plot_lengths(out, trained, title=f"SPIRAL training answers ({a.model}, plan {a.plan})")
    with open(out / "timing.jsonl", "a") as f:
        f.write(json.dumps({"command_wall_s": round(time.time() - t0, 1), "post_wall_s": post["post_wall_s"]}) + "\n")
    if a.export:
        for p in stronger.export(out, Path(a.export)):
            print(p)
    stronger.log(f"done in {(time.time() - t0) / 60:.1f} min: {out / 'results_stronger.md'}")
    return 0


def main() -> int:
    a = parse()
    if a.plan != "round1":
        return main_stronger(a)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {name: evals(run_arm(a, name, ARMS[name])) for name in a.arms}
    (out / "results.json").write_text(json.dumps({k: {str(s): e for s, e in v.items()} for k, v in results.items()},
                                                 indent=1) + "\n")
    md = table(results)
    (out / "results.md").write_text(md + "\n")
    plot(results, out)
    print(md)
    print(f"\nresults: {out / 'results.md'}, {out / 'results.json'}, {out / 'curves.png'}")
    if a.smoke:
        print("\n".join(estimate(a, out / name) for name in a.arms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
