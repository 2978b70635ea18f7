"""SPIRAL on Kuhn Poker with the embedded model: RAE + population vs a control with RAE off.

One command (from the repository root):

    .venv/bin/python experiments/spiral/run.py                 # the measured result (~12 steps x 32 games)
    .venv/bin/python experiments/spiral/run.py --resume        # continue unfinished arms after a stop
    .venv/bin/python experiments/spiral/run.py --smoke         # a few minutes: the machinery, not a result

Each arm is one `serl train --recipe spiral` run that evaluates itself before training, every
--eval_every steps and at the end: chips per game and win rate against uniform random over --eval_games
Kuhn hands (seats alternated, the same deals at every evaluation, 95% intervals), the invalid-move rate,
and the exploitability of the policy estimated from --exploit_samples samples per info state. The arms
differ only in --rae (on: role baselines, EMA 0.95; off: the step's mean return as the baseline). The
table (results.md), results.json and the curves (PNG) go to --out.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARMS = {"rae_population": ["--rae", "true"], "control_no_rae": ["--rae", "false"]}


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/spiral_experiment", help="folder of the two runs and the results")
    p.add_argument("--resume", action="store_true", help="continue arms whose run directory exists")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: 2 steps of 4 games, 8 eval games, hf")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--games_per_step", type=int, default=32)
    p.add_argument("--eval_every", type=int, default=6)
    p.add_argument("--eval_games", type=int, default=400)
    p.add_argument("--exploit_samples", type=int, default=32)
    p.add_argument("--generate_max_len", type=int, default=128)
    p.add_argument("--population_size", type=int, default=4)
    p.add_argument("--population_every", type=int, default=3)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--generator", default="auto", help="auto (vLLM when installed), vllm or hf")
    p.add_argument("--action_parser", default="mention", choices=("strict", "lenient", "mention"),
                   help="how a response becomes a move; mention (default here): SmolLM2 never uses the box "
                        "at step 0 (README), so the legal action it names last is taken")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if a.smoke:
        a.steps, a.games_per_step, a.eval_every, a.eval_games, a.exploit_samples = 2, 4, 2, 8, 1
        a.generate_max_len, a.population_every, a.generator = 24, 1, "hf"
    return a


def train_args(a, run_dir: Path, arm: list[str]) -> list[str]:
    return ["--recipe", "spiral", "--run_dir", str(run_dir), "--games", "kuhn_poker", "--kuhn_rules", "standard",
            "--opponent", "population", "--population_size", str(a.population_size),
            "--population_every", str(a.population_every), "--games_per_step", str(a.games_per_step),
            "--steps", str(a.steps), "--generate_max_len", str(a.generate_max_len), "--actor_learning_rate", str(a.lr),
            "--eval_steps", str(a.eval_every), "--eval_games", str(a.eval_games),
            "--exploit_samples", str(a.exploit_samples), "--generator", a.generator, "--action_parser", a.action_parser,
            "--save_steps", str(a.eval_every), "--max_ckpt_num", "1", "--save_model", "false", "--seed", str(a.seed),
            "--mask_truncated", "false",  # SmolLM2 runs past the limit in ~90% of its answers (README)
            "--micro_train_batch_size", "8", "--progress", "plain", *arm]


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
    r = subprocess.run([sys.executable, "-m", "serl.cli", *cmd], cwd=ROOT)
    if r.returncode:
        sys.exit(f"{name}: serl train exited with {r.returncode}; rerun with --resume to continue")
    return run_dir


def evals(run_dir: Path) -> dict[int, dict]:
    """Evaluation rows of metrics.jsonl by step (the rows that carry eval/ keys)."""
    out: dict[int, dict] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        ev = {k.removeprefix("eval/kuhn_poker/"): v for k, v in row.items() if k.startswith("eval/kuhn_poker/")}
        if ev:
            out.setdefault(row["step"], {}).update(ev)
    return out


def table(results: dict[str, dict[int, dict]]) -> str:
    lines = ["| arm | step | exploitability (chips/hand) | chips/game vs random [95% CI] | win rate vs random "
             "[95% CI] | invalid-move rate |", "|---|---|---|---|---|---|"]
    for arm, by_step in results.items():
        for step, e in sorted(by_step.items()):
            g = lambda k: e.get(k, float("nan"))  # noqa: E731
            lines.append(f"| {arm} | {step} | {g('exploitability'):.3f} | {g('vs_random/payoff'):+.3f} "
                         f"[{g('vs_random/payoff_lo'):+.3f}, {g('vs_random/payoff_hi'):+.3f}] | "
                         f"{g('vs_random/win_rate'):.3f} [{g('vs_random/win_lo'):.3f}, {g('vs_random/win_hi'):.3f}] | "
                         f"{g('vs_random/invalid_rate'):.3f} |")
    return "\n".join(lines)


def plot(results: dict[str, dict[int, dict]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("exploitability", "exploitability (chips/hand)", None),
              ("vs_random/payoff", "chips/game vs random", ("vs_random/payoff_lo", "vs_random/payoff_hi")),
              ("vs_random/invalid_rate", "invalid-move rate", None)]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), layout="constrained")
    for ax, (key, label, band) in zip(axes, panels):
        for arm, by_step in results.items():
            steps = sorted(s for s in by_step if key in by_step[s])
            ax.plot(steps, [by_step[s][key] for s in steps], marker="o", label=arm)
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
    results = {name: evals(run_arm(a, name, arm)) for name, arm in ARMS.items()}
    (out / "results.json").write_text(json.dumps({k: {str(s): e for s, e in v.items()} for k, v in results.items()},
                                                 indent=1) + "\n")
    md = table(results)
    (out / "results.md").write_text(md + "\n")
    plot(results, out)
    print(md)
    print(f"\nresults: {out / 'results.md'}, {out / 'results.json'}, {out / 'curves.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
