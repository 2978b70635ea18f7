"""Run A (SPIN) and Run B (online DPO) on the embedded SmolLM2, with held-out evaluation.

    python experiments/spin/run.py                 # the full experiment (README.md)
    python experiments/spin/run.py --smoke         # minutes: tiny sizes, proves the pipeline
    python experiments/spin/run.py --resume        # continue in the same --out directory

Run A trains SPIN on dataset/arith_spin_train.jsonl and evaluates the model before and
after each iteration on dataset/arith_spin_heldout.jsonl: greedy accuracy with
\\boxed{}-only extraction and with the last-number fallback, the \\boxed{} rate, the
stop rate, the per-token log-prob of the held-out gold solutions, and DPO preference
accuracy on held-out (gold, theta0-sample) pairs with theta0 as the reference. Run B
trains online DPO with the rule reward and with the label-free majority vote.
Nothing is tuned on the held-out set: every setting is fixed below, before any run.

Everything lands in --out (default runs/spin_experiment): the training run directories,
one JSON per evaluation, results.md (the tables, with 95% CIs) and PNG curves. Every
stage is skipped when its output exists, so --resume after a crash redoes only what is
missing (training itself resumes from its newest checkpoint with `serl train --resume`).
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's serl

from serl.eval.stats import mcnemar_p, paired_bootstrap, wilson  # noqa: E402

TRAIN, HELDOUT = ROOT / "dataset/arith_spin_train.jsonl", ROOT / "dataset/arith_spin_heldout.jsonl"

# Fixed before any run (not tuned on the held-out set). SPIN's beta, sampling and mixing;
# a learning rate for a 135M model and a few dozen steps instead of SPIN's 5e-7 for 7B.
FULL = dict(train=256, heldout=200, iterations=2, batch=16, epochs=1, lr=1e-5, beta=0.1, max_len=128,
            eval_max_len=160, online_steps=20, online_prompts=8, online_n=4)
SMOKE = dict(train=8, heldout=12, iterations=2, batch=4, epochs=1, lr=5e-6, beta=0.1, max_len=32,
             eval_max_len=40, online_steps=2, online_prompts=2, online_n=2)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---- training ---------------------------------------------------------------------------
def serl_train(run_dir: Path, steps: int, flags: list[str]) -> None:
    """Train to ``steps`` in ``run_dir``: a new run, or ``--resume`` of an existing one."""
    from serl.run.checkpoint import latest_checkpoint

    ckpt = latest_checkpoint(run_dir) if run_dir.exists() else None
    if ckpt is not None and int(ckpt.name.split("_")[1]) >= steps:
        return
    args = (["--resume", str(run_dir), "--steps", str(steps)] if run_dir.exists()
            else [*flags, "--steps", str(steps), "--run_dir", str(run_dir)])
    log(f"serl train {' '.join(args[:4])} ... (to step {steps})")
    r = subprocess.run([sys.executable, "-m", "serl.cli", "train", *args], cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"serl train failed ({r.returncode}) in {run_dir}")


def policy_at(run_dir: Path, step: int) -> str:
    return str(run_dir / "checkpoints" / f"step_{step:06d}" / "policy")


# ---- evaluation -------------------------------------------------------------------------
class Evaluator:
    def __init__(self, out: Path, problems, args):
        from serl.config.options import TrainConfig
        from serl.models.resolve import load_tokenizer, resolve_model
        from serl.rewards import EquivalenceChecker

        self.out, self.problems, self.args = out, problems, args
        self.base = resolve_model("smollm2")
        self.tok = load_tokenizer(self.base)
        self.checker = EquivalenceChecker(workers=1)
        sp = TrainConfig().system_prompt  # the prompt the recipe trains with
        self.prompts = [self.tok.apply_chat_template([{"role": "user", "content": f"{p.text}\n{sp}"}],
                                                     add_generation_prompt=True, tokenize=False) for p in problems]
        self.prompt_ids = [self.tok(p, add_special_tokens=False)["input_ids"] for p in self.prompts]
        from serl.recipes.spin.recipe import answer_ids

        self.gold_ids = [answer_ids(self.tok, p.solution) for p in problems]

    def theta0_samples(self) -> list[list[int]]:
        """One answer per held-out problem from theta0 at temperature 1.0 (SPIN's sampling)."""
        path = self.out / "heldout_theta0_samples.json"
        if not path.exists():
            from serl.engines.base import Sampling
            from serl.engines.factory import make_generator

            gen = make_generator(self.args.generator, self.base, self.tok, seed=12345)
            groups = gen.generate(self.prompts, 1, Sampling(self.args.max_len, 1.0, 1.0))
            gen.close()
            end = self.gold_ids[0][-1]
            path.write_text(json.dumps([list(g[0].token_ids) or [end] for g in groups]))
        return json.loads(path.read_text())

    def logprob_sums(self, model_path: str, responses: list[list[int]]) -> list[tuple[float, int]]:
        from serl.engines.learner_core import LearnerConfig
        from serl.engines.torch_learner import TorchLearner

        scorer = TorchLearner(model_path, LearnerConfig(micro_batch_size=16), need_ref=False, trainable=False)
        lps = scorer.logprobs(self.prompt_ids, responses)
        return [(float(t.sum()), len(t)) for t in lps]

    def evaluate(self, tag: str, model_path: str) -> dict:
        """Per-problem results of one model, cached in eval_<tag>.json."""
        path = self.out / f"eval_{tag}.json"
        if path.exists():
            return json.loads(path.read_text())
        from serl.engines.base import Sampling
        from serl.engines.factory import make_generator
        from serl.rewards.extract import extract_answer, last_boxed

        log(f"evaluating {tag}: {model_path}")
        t0 = time.perf_counter()
        gen = make_generator(self.args.generator, model_path, self.tok, seed=0)
        groups = gen.generate(self.prompts, 1, Sampling(self.args.eval_max_len, 0.0, 1.0))
        gen.close()
        texts = [g[0].text for g in groups]
        golds = [p.label for p in self.problems]
        boxed_ans = [extract_answer(t, "none") for t in texts]
        number_ans = [extract_answer(t, "number") for t in texts]
        ok_boxed = self.checker.equal_many(list(zip(golds, boxed_ans)))
        ok_number = self.checker.equal_many(list(zip(golds, number_ans)))
        gold = self.logprob_sums(model_path, self.gold_ids)
        sample = self.logprob_sums(model_path, self.theta0)
        res = {"tag": tag, "model": model_path, "correct_boxed": [int(x) for x in ok_boxed],
               "correct_number": [int(x) for x in ok_number],
               "boxed": [int(last_boxed(t) is not None) for t in texts],
               "stopped": [int(g[0].finish_reason == "stop") for g in groups],
               "gold_logp": [s for s, _ in gold], "gold_len": [n for _, n in gold],
               "sample_logp": [s for s, _ in sample], "texts": texts, "seconds": time.perf_counter() - t0}
        path.write_text(json.dumps(res))
        return res


# ---- statistics (serl.eval.stats: wilson, paired_bootstrap, mcnemar_p) -------------------
def summary(res: dict, ref0: dict, beta: float) -> dict:
    n = len(res["boxed"])
    per_tok = [s / m for s, m in zip(res["gold_logp"], res["gold_len"])]
    # implicit reward margin against theta0: beta*[(gold - gold0) - (sample - sample0)]
    margin = [beta * ((g - g0) - (s - s0)) for g, g0, s, s0 in
              zip(res["gold_logp"], ref0["gold_logp"], res["sample_logp"], ref0["sample_logp"])]
    out = {"n": n, "per_token_gold_logp": sum(per_tok) / n, "_per_tok": per_tok, "_margin_ok": [int(m > 0) for m in margin]}
    for key in ("correct_boxed", "correct_number", "boxed", "stopped"):
        k = sum(res[key])
        out[key] = (k / n, *wilson(k, n))
    k = sum(out["_margin_ok"])
    out["pref_accuracy"] = (k / n, *wilson(k, n))
    return out


def fmt(triple) -> str:
    p, lo, hi = triple
    return f"{100 * p:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def report(out: Path, evals: dict[str, dict], runs: dict[str, Path], beta: float) -> str:
    ref0 = evals["theta0"]
    sums = {t: summary(r, ref0, beta) for t, r in evals.items()}
    lines = ["| model | n | boxed-only acc % | last-number acc % | boxed rate % | stop rate % | "
             "gold log-prob / token | pref. acc. vs theta0 % |", "|---" * 8 + "|"]
    for t, s in sums.items():
        lines.append(f"| {t} | {s['n']} | {fmt(s['correct_boxed'])} | {fmt(s['correct_number'])} | "
                     f"{fmt(s['boxed'])} | {fmt(s['stopped'])} | {s['per_token_gold_logp']:.3f} | "
                     f"{fmt(s['pref_accuracy'])} |")
    lines += ["", "Change against theta0 (paired over the same problems; mean and 95% paired-bootstrap "
              "interval, McNemar exact p for accuracies):", "",
              "| model | boxed-only acc (pts) | p | last-number acc (pts) | p | boxed rate (pts) | "
              "gold log-prob / token |", "|---" * 7 + "|"]
    for t, r in evals.items():
        if t == "theta0":
            continue
        row = [t]
        for key in ("correct_boxed", "correct_number", "boxed"):
            d, lo, hi = paired_bootstrap(ref0[key], r[key])
            row.append(f"{100 * d:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]")
            if key != "boxed":
                row.append(f"{mcnemar_p(ref0[key], r[key]):.3g}")
        d, lo, hi = paired_bootstrap(sums["theta0"]["_per_tok"], sums[t]["_per_tok"])
        row.append(f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]")
        lines.append("| " + " | ".join(row) + " |")
    for name, run_dir in runs.items():
        rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        rows = [r for r in rows if "loss/policy" in r or "pairs/groups" in r]
        if rows and "reward/mean" in rows[0]:
            k = max(1, len(rows) // 4)
            mean = lambda key, part: sum(r.get(key, 0.0) for r in part) / len(part)  # noqa: E731
            lines += ["", f"{name}: training reward {mean('reward/mean', rows[:k]):.3f} (first {k} steps) -> "
                          f"{mean('reward/mean', rows[-k:]):.3f} (last {k}); DPO margin (steps with pairs) "
                          f"{mean('dpo/margin', [r for r in rows if 'dpo/margin' in r] or [{}]):.3f}; "
                          f"tied groups {sum(r.get('pairs/tied', 0) for r in rows):.0f} of "
                          f"{sum(r.get('pairs/groups', 0) for r in rows):.0f}"]
    text = "\n".join(lines) + "\n"
    (out / "results.md").write_text(text)
    plot(out, sums, runs)
    return text


def plot(out: Path, sums: dict, runs: dict[str, Path]) -> None:
    from matplotlib.figure import Figure

    spin_tags = [t for t in sums if t == "theta0" or t.startswith("spin_iter")]
    fig = Figure(figsize=(13, 4), layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3)
    x = list(range(len(spin_tags)))
    for key, label in (("correct_boxed", "boxed-only accuracy"), ("correct_number", "last-number accuracy"),
                       ("boxed", "boxed rate"), ("pref_accuracy", "pref. accuracy vs theta0")):
        ys = [sums[t][key] for t in spin_tags]
        ax1.errorbar(x, [100 * y[0] for y in ys], yerr=[[100 * (y[0] - y[1]) for y in ys],
                                                         [100 * (y[2] - y[0]) for y in ys]],
                     marker="o", capsize=3, label=label)
    ax1.set(title="Run A: held-out, after each SPIN iteration (95% Wilson)", xlabel="iteration", ylabel="%",
            xticks=x)
    ax1.legend(fontsize=8)
    ax2.plot(x, [sums[t]["per_token_gold_logp"] for t in spin_tags], marker="o")
    ax2.set(title="Run A: held-out gold solutions", xlabel="iteration", ylabel="log-prob per token", xticks=x)
    for name, run_dir in runs.items():
        rows = [json.loads(s) for s in (run_dir / "metrics.jsonl").read_text().splitlines()]
        key = "reward/mean" if name.startswith("online") else "spin/real_logp"
        pts = [(r["step"], r[key]) for r in rows if key in r]
        if pts and name.startswith("online"):
            ax3.plot(*zip(*pts), marker=".", label=f"{name}: training reward")
    ax3.set(title="Run B: online DPO training reward", xlabel="step", ylabel="mean reward")
    if ax3.get_legend_handles_labels()[0]:
        ax3.legend(fontsize=8)
    fig.savefig(out / "curves.png", dpi=110)


# ---- the experiment -----------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "runs" / "spin_experiment"))
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: minutes, proves the pipeline only")
    ap.add_argument("--resume", action="store_true", help="continue in an existing --out directory")
    ap.add_argument("--generator", default="auto", choices=("auto", "vllm", "hf"))
    ap.add_argument("--skip_online", action="store_true", help="Run A only")
    args = ap.parse_args(argv)
    for k, v in (SMOKE if args.smoke else FULL).items():
        setattr(args, k, v)
    out = Path(args.out)
    if out.exists() and any(out.iterdir()) and not args.resume:
        sys.exit(f"{out} exists; add --resume to continue it, or choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()

    from serl.config.registry import config_class
    from serl.data.seeds import read_seeds
    from serl.recipes.spin.config import iteration_steps

    heldout = read_seeds(HELDOUT, "problem", "answer", limit=args.heldout, output_key="solution")
    ev = Evaluator(out, heldout, args)
    ev.theta0 = ev.theta0_samples()
    evals = {"theta0": ev.evaluate("theta0", ev.base)}

    common = ["--generator", args.generator, "--prompt_data", str(TRAIN), "--max_samples", str(args.train),
              "--progress", "plain", "--save_model", "false", "--seed", "42",
              "--actor_learning_rate", str(args.lr), "--lr_warmup_ratio", "0.1", "--beta", str(args.beta),
              "--generate_max_len", str(args.max_len), "--micro_train_batch_size", "8"]
    spin_flags = ["--recipe", "spin", "--spin_mode", "spin", "--rollout_batch_size", str(args.batch),
                  "--epochs_per_iteration", str(args.epochs), *common]
    cfg = config_class("spin")(rollout_batch_size=args.batch, epochs_per_iteration=args.epochs)
    ends = [sum(iteration_steps(cfg, args.train, t) for t in range(i + 1)) for i in range(args.iterations)]
    # One run over all iterations (the LR schedule spans it), with a checkpoint kept at every
    # iteration end: checkpoints every gcd(ends) steps, all of them kept.
    every = math.gcd(*ends)
    spin_flags += ["--save_steps", str(every), "--max_ckpt_num", str(ends[-1] // every)]
    run_a = out / "run_a_spin"
    log(f"Run A: {args.iterations} SPIN iterations end at steps {ends}")
    serl_train(run_a, ends[-1], spin_flags)
    for i, end in enumerate(ends):
        evals[f"spin_iter{i + 1}"] = ev.evaluate(f"spin_iter{i + 1}", policy_at(run_a, end))
    runs = {"run_a_spin": run_a}
    if not args.skip_online:
        for mode in ("rule", "majority"):
            run_b = out / f"run_b_online_{mode}"
            flags = ["--recipe", "spin", "--spin_mode", "online", "--reward_mode", mode, "--rollout_batch_size",
                     str(args.online_prompts), "--n_samples_per_prompt", str(args.online_n),
                     "--save_steps", str(args.online_steps // 4 or 1), *common]
            serl_train(run_b, args.online_steps, flags)
            evals[f"online_{mode}"] = ev.evaluate(f"online_{mode}", policy_at(run_b, args.online_steps))
            runs[f"online_{mode}"] = run_b
    ev.checker.close()
    text = report(out, evals, runs, args.beta)
    print(text)
    log(f"done in {(time.perf_counter() - t_start) / 60:.1f} min: {out / 'results.md'}, {out / 'curves.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
