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
ARMS = {"rae_population": ["--rae", "true"], "control_no_rae": ["--rae", "false"]}
# The measured run. Trimmed to fit ~45 min per arm on an idle 2-core machine (README, "Cost"): one PPO
# epoch (upstream: 2), bf16 autocast in the learner, 64 new tokens, a population of 3 (fewer weight
# swaps per round), 12 samples per info state.
FULL = dict(steps=12, games_per_step=32, eval_every=6, eval_games=400, exploit_samples=12, generate_max_len=64,
            population_size=3, population_every=3, ppo_epochs=1, save_steps=3)
# --smoke: the FULL step (games, tokens, epochs, generator) twice and the FULL evaluation at steps 0 and 2,
# a snapshot after every step, so that the estimate needs no scaling of batch sizes.
SMOKE = dict(steps=2, eval_every=2, population_every=1, save_steps=1)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/spiral_experiment", help="folder of the two runs and the results")
    p.add_argument("--resume", action="store_true", help="continue arms whose run directory exists")
    p.add_argument("--smoke", action="store_true", help="the FULL step and evaluation twice, and a time estimate")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated arms to run: {', '.join(ARMS)}")
    for name, value in FULL.items():
        p.add_argument(f"--{name}", type=int, default=value)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--bf16", default="true", choices=("true", "false"), help="bf16 autocast in the learner")
    p.add_argument("--generator", default="auto", help="auto (vLLM when installed), vllm or hf")
    p.add_argument("--action_parser", default="mention", choices=("strict", "lenient", "mention"),
                   help="how a response becomes a move; mention (default here): SmolLM2 never uses the box "
                        "at step 0 (README), so the legal action it names last is taken; the strict rate "
                        "is reported as well")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    a.arms = [x.strip() for x in a.arms.split(",") if x.strip()]
    if not a.arms or set(a.arms) - set(ARMS):
        p.error(f"--arms: choose among {', '.join(ARMS)}")
    if a.smoke:
        a.full = {k: getattr(a, k) for k in FULL}  # what the estimate scales to
        for k, v in SMOKE.items():
            setattr(a, k, v)
    return a


def train_args(a, run_dir: Path, arm: list[str]) -> list[str]:
    return ["--recipe", "spiral", "--run_dir", str(run_dir), "--games", "kuhn_poker", "--kuhn_rules", "standard",
            "--opponent", "population", "--population_size", str(a.population_size),
            "--population_every", str(a.population_every), "--games_per_step", str(a.games_per_step),
            "--steps", str(a.steps), "--generate_max_len", str(a.generate_max_len), "--actor_learning_rate", str(a.lr),
            "--ppo_epochs", str(a.ppo_epochs), "--bf16", a.bf16,
            "--eval_steps", str(a.eval_every), "--eval_games", str(a.eval_games),
            "--exploit_samples", str(a.exploit_samples), "--generator", a.generator, "--action_parser", a.action_parser,
            "--save_steps", str(a.save_steps), "--max_ckpt_num", "1", "--save_model", "false", "--seed", str(a.seed),
            "--mask_truncated", "false",  # SmolLM2 runs past the limit in ~90% of its answers (README)
            "--micro_train_batch_size", "4", "--progress", "plain", *arm]  # 4: ~1 GB less at the peak than 8


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
    timing = {"wall_s": round(time.time() - wall, 1), "cpu_s": round(cpu_seconds() - cpu, 1), "command": cmd[:3]}
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
            g = lambda k: e.get(k, float("nan"))  # noqa: E731
            lines.append(f"| {arm} | {step} | {g('exploitability'):.3f} | {g('vs_random/payoff'):+.3f} "
                         f"[{g('vs_random/payoff_lo'):+.3f}, {g('vs_random/payoff_hi'):+.3f}] | "
                         f"{g('vs_random/win_rate'):.3f} [{g('vs_random/win_lo'):.3f}, {g('vs_random/win_hi'):.3f}] | "
                         f"{g('vs_random/invalid_rate'):.3f} | {g('vs_random/invalid_rate_strict'):.3f} |")
    return "\n".join(lines)


def plot(results: dict[str, dict[int, dict]], out: Path) -> None:
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
    fig.suptitle("SPIRAL on Kuhn Poker (SmolLM2-135M): RAE + population vs RAE off")
    fig.savefig(out / "curves.png", dpi=110)


def main() -> int:
    a = parse()
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
