"""The stronger-model plan of the SPIRAL experiment (issue 33): settings, the probe stage, the
evaluations after training, the report and the export. run.py drives it (``--plan stronger``,
the default for any --model but the embedded one).

Stages, each cached in --out so that ``run.py --resume`` redoes only what is missing:
  probe.json              probe_legal.py on training material: fixes --generate_max_len and --action_parser
  <arm>/                  the two training runs (run.py's run_arm)
  games/<model>.json      paired_eval.py: per-hand outcomes vs random and vs θ0, the same deals for all
  exploit_ci.{json,md}    exploit_ci.py: Kuhn exploitability from --exploit_k samples per info state
  math/eval/*.json        transfer.py: greedy pass@1 on GSM8K and SVAMP samples, per problem
  results_stronger.{md,json}
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

GAMES = "kuhn_poker,tictactoe"
# Fixed before the probe and any run (README, "Plan for the Qwen run"). Per arm: 16 steps of 32 games
# (16 Kuhn hands, 16 TicTacToe games), a population of the current policy and 3 snapshots (one every 4
# steps; upstream: 25, every 5, over hundreds of steps), one PPO epoch (upstream 2: the update is the
# costliest stage on this CPU), LoRA rank 32 / alpha 64 at 5e-5 (10x serl_efficacy's full fine-tuning
# rate for this model, as in its third round; Schulman et al., "LoRA Without Regret", Thinking Machines
# 2025), truncated answers masked (upstream's default). The in-training evaluations are for the curves
# only (50 games per game type, 12 samples per info state); the tables come from the paired stages.
FULL = dict(steps=16, games_per_step=32, eval_every=8, eval_games=50, exploit_samples=12, population_size=4,
            population_every=4, ppo_epochs=1, save_steps=1)
SMOKE = dict(steps=2, games_per_step=4, eval_every=2, eval_games=2, exploit_samples=1, population_size=2,
             population_every=1, ppo_epochs=1, save_steps=1)
POST = dict(probe_n=60, probe_limits="192,384", kuhn_hands=400, ttt_games=200, kuhn_hands_vs_base=400,
            ttt_games_vs_base=100, exploit_k=48, gsm8k=200, svamp=200, math_max_len=384)
POST_SMOKE = dict(probe_n=4, probe_limits="32,64", kuhn_hands=6, ttt_games=4, kuhn_hands_vs_base=4,
                  ttt_games_vs_base=2, exploit_k=4, gsm8k=3, svamp=3, math_max_len=48)
LR = 5e-5
TRAIN_FLAGS = ["--lora_rank", "32", "--lora_alpha", "64", "--save_merged", "true", "--vllm_kv_cache_gib", "0.5",
               "--micro_train_batch_size", "4", "--temperature", "1.0", "--mask_truncated", "true"]
TRAINED = ("rae_population", "control_no_rae")
# The second Qwen plan (--plan stronger2; README, "Second Qwen plan"), fixed before its probe ran. The
# first plan's policies dropped their reasoning within 4 steps (a cut answer is an invalid move), so:
# the probe also tries a brevity instruction and keeps it only by decide_prompt's rule, and a KL term to
# θ0 (k3, in the loss) holds the policy near θ0: β defaults to DeepSeekMath GRPO's 0.04 (Shao et al.,
# 2024); the run uses --kl_coef 0.5, chosen by a 4-step pilot on training signals (README). Everything
# else is the first plan's.
PROMPTS2 = {"upstream": "", "brief": "Be brief: reason in at most three short sentences, then give your move."}
KL2 = ["--use_kl_loss", "true", "--kl_estimator", "k3"]  # with --init_kl_coef from run.py's --kl_coef
KL2_COEF = 0.04
POST2 = {**POST, "probe_limits": "128,192,256,384"}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def probe_stage(a, out: Path) -> dict:
    """The probe's decision (cached in probe.json); --generate_max_len / --action_parser given on the
    command line override it, and the override is recorded."""
    from probe_legal import decide_prompt, run_probe

    path = out / "probe.json"
    if path.exists():
        probe = json.loads(path.read_text())
    else:
        log(f"probe: {a.model}, {a.probe_n} states per game, limits {a.probe_limits}")
        limits = [int(x) for x in a.probe_limits.split(",")]
        run = lambda text="": run_probe(a.model, a.games.split(","), a.probe_n, limits, 1.0,  # noqa: E731
                                        a.generator, a.seed, system_prompt=text)
        if a.plan == "stronger2":
            probe = {"prompts": {name: run(text) for name, text in PROMPTS2.items()}, "instructions": PROMPTS2}
            probe["decision"] = decide_prompt(probe["prompts"])
        else:
            probe = run()
        from common import write_json

        write_json(path, probe)
    d = probe["decision"]
    log(f"probe decision: {d['why']}")
    return {"generate_max_len": a.generate_max_len or d["generate_max_len"],
            "action_parser": a.action_parser or d["action_parser"],
            "system_prompt": PROMPTS2[d["system_prompt_name"]] if "system_prompt_name" in d else "",
            "overridden": bool(a.generate_max_len or a.action_parser)}


def chosen(probe: dict) -> dict:
    """The probe of the chosen instruction (the second plan probes several)."""
    return probe["prompts"][probe["decision"]["system_prompt_name"]] if "prompts" in probe else probe


def projection(probe: dict, a, tok_per_s: float = 400.0) -> str:
    """A rough length of the whole run from the probe's answer lengths and a generation speed
    (serl_efficacy measured ~400 tokens/s greedy for this model with vLLM on this CPU)."""
    lim = str(a.generate_max_len)
    tok = {g: r[lim]["tokens_mean"] for g, r in chosen(probe)["per_game"].items() if lim in r}
    kuhn, ttt = tok.get("kuhn_poker", 200.0), tok.get("tictactoe", 200.0)
    gens = lambda hands, games, both=1: hands * 1.5 * both * kuhn + games * 4.5 * both * ttt  # noqa: E731
    step = gens(a.games_per_step / 2, a.games_per_step / 2, 2)
    evals = (1 + a.steps // a.eval_every) * (gens(a.eval_games, a.eval_games) + 12 * a.exploit_samples * kuhn)
    post = (3 * gens(a.kuhn_hands, a.ttt_games) + 2 * gens(a.kuhn_hands_vs_base, a.ttt_games_vs_base, 2)
            + 3 * 12 * a.exploit_k * kuhn + 3 * (a.gsm8k + a.svamp) * 230)
    gen_h = (2 * (a.steps * step + evals) + post) / tok_per_s / 3600
    return (f"projection: ~{gen_h:.1f} h of generation at {tok_per_s:.0f} tok/s (answers ~{kuhn:.0f} tokens in "
            f"Kuhn, ~{ttt:.0f} in TicTacToe), plus the updates (~{2 * a.steps * 3:.0f} min at ~3 min a step) "
            f"and engine starts")


def arm_cfg(out: Path, arm: str) -> dict:
    import yaml

    c = yaml.safe_load((out / arm / "config.yaml").read_text())
    keys = ("seed", "generate_max_len", "temperature", "top_p", "kuhn_rules", "show_legal_actions",
            "prompt_example", "action_parser", "system_prompt", "model")
    return {k: c.get(k) for k in keys}


def post_stages(a, out: Path, arms: list[str]) -> dict:
    """Paired games, exploitability with intervals, math transfer; returns the report's data."""
    from paired_eval import evaluate_model

    from serl.models.resolve import resolve_model

    trained = [x for x in arms if x in TRAINED]
    if not trained:
        raise SystemExit("the evaluations compare trained arms with θ0: run at least one training arm")
    base = resolve_model(a.model)
    models = {"theta0": base}
    for arm in trained:
        merged = out / arm / "model_merged"
        if not merged.is_dir():
            raise SystemExit(f"{merged}: missing (the arm did not finish, or ran without --save_merged)")
        models[arm] = str(merged)
    cfg = arm_cfg(out, trained[0])
    for arm in trained[1:]:
        if arm_cfg(out, arm) != cfg:
            raise SystemExit(f"{arm}: evaluation settings differ from {trained[0]}'s; the pairing needs equal ones")
    games = a.games.split(",")
    t = {}
    for tag, path in models.items():
        t0 = time.perf_counter()
        n = {"kuhn_poker": a.kuhn_hands, "tictactoe": a.ttt_games}
        evaluate_model(path, base, out / "games" / f"{tag}.json", games=games, n_games=n, against_base=False,
                       cfg=cfg, generator=a.generator)
        if tag != "theta0":
            evaluate_model(path, base, out / "games" / f"{tag}_vs_theta0.json", games=games, against_base=True,
                           n_games={"kuhn_poker": a.kuhn_hands_vs_base, "tictactoe": a.ttt_games_vs_base},
                           cfg=cfg, generator=a.generator)
        t[f"games/{tag}"] = round(time.perf_counter() - t0, 1)
    if "kuhn_poker" in games:
        import exploit_ci

        t0 = time.perf_counter()
        exploit_ci.main(["--out", str(out), "--arms", ",".join(trained), "--k", str(a.exploit_k),
                         "--generator", a.generator, "--reps", "2000" if not a.smoke else "200"])
        t["exploit_ci"] = round(time.perf_counter() - t0, 1)
    import transfer

    t0 = time.perf_counter()
    math = transfer.evaluate(out, models, base, a.gsm8k, a.svamp, a.generator, a.math_max_len)
    t["math"] = round(time.perf_counter() - t0, 1)
    return {"models": list(models), "math": math, "post_wall_s": t}


def games_tables(out: Path, tags: list[str], games: list[str]) -> str:
    from paired_eval import change, kinds, rates

    load = lambda name: json.loads((out / "games" / f"{name}.json").read_text())["games"]  # noqa: E731
    res = {tag: load(tag) for tag in tags}
    lines = ["Against uniform random (seats alternated, the same deals for every model; 95% intervals: payoff by "
             "bootstrap over hands, win rate Wilson; changes paired by hand):", "",
             "| game | model | chips or payoff / game | win rate | draws | invalid moves | strict parser | "
             "change vs θ0: payoff | change vs θ0: win rate |", "|---|---|---|---|---|---|---|---|---|"]
    for g in games:
        for tag in tags:
            r = rates(res[tag][g]["random"])
            row = (f"| {g} | {tag} | {r['payoff']:+.3f} [{r['payoff_ci'][0]:+.3f}, {r['payoff_ci'][1]:+.3f}] | "
                   f"{r['win']:.3f} [{r['win_ci'][0]:.3f}, {r['win_ci'][1]:.3f}] | {r['draw']:.3f} | "
                   f"{r['invalid']:.3f} | {r['invalid_strict']:.3f} | ")
            if tag != "theta0":
                c = change(res["theta0"][g]["random"], res[tag][g]["random"])
                row += (f"{c['payoff']:+.3f} [{c['payoff_ci'][0]:+.3f}, {c['payoff_ci'][1]:+.3f}] | "
                        f"{c['win']:+.3f} [{c['win_ci'][0]:+.3f}, {c['win_ci'][1]:+.3f}] |")
            else:
                row += " | |"
            lines.append(row)
    trained = [t for t in tags if t != "theta0"]
    if len(trained) == 2:
        lines.append("")
        for g in games:
            c = change(res[trained[1]][g]["random"], res[trained[0]][g]["random"])
            lines.append(f"{g}, {trained[0]} minus {trained[1]} against random (paired): payoff {c['payoff']:+.3f} "
                         f"[{c['payoff_ci'][0]:+.3f}, {c['payoff_ci'][1]:+.3f}], win rate {c['win']:+.3f} "
                         f"[{c['win_ci'][0]:+.3f}, {c['win_ci'][1]:+.3f}]")
    lines += ["", "Kinds of gain against random, each arm against θ0 on the same deals: format (share of hands "
              "with an invalid move), stopping (share of moves cut at the length limit), correctness (payoff on "
              "the hands where neither model moved invalidly or was cut; paired bootstrap):", "",
              "| game | model | hands with an invalid move: θ0 → arm | moves cut: θ0 → arm | "
              "clean hands | θ0 payoff there | change there [95% CI] |", "|---|---|---|---|---|---|---|"]
    for g in games:
        for tag in trained:
            try:
                k = kinds(res["theta0"][g]["random"], res[tag][g]["random"])
            except ValueError as e:  # results written before cut moves were recorded
                lines.append(f"| {g} | {tag} | {e} | | | | |")
                continue
            row = (f"| {g} | {tag} | {k['invalid_hands'][0]:.3f} → {k['invalid_hands'][1]:.3f} | "
                   f"{k['cut_moves'][0]:.3f} → {k['cut_moves'][1]:.3f} | {k['clean_n']} | ")
            row += (f"{k['clean_before']:+.3f} | {k['clean_change']:+.3f} [{k['clean_ci'][0]:+.3f}, "
                    f"{k['clean_ci'][1]:+.3f}] |" if k["clean_n"] else " | |")
            lines.append(row)
    lines += ["", "Against the untrained model θ0 (the same deals, seats alternated; θ0 against itself is 0 by "
              "symmetry, so the row is the change):", "",
              "| game | model | payoff / game vs θ0 | win rate | draws | invalid moves | strict parser |",
              "|---|---|---|---|---|---|---|"]
    for g in games:
        for tag in trained:
            r = rates(load(f"{tag}_vs_theta0")[g]["theta0"])
            lines.append(f"| {g} | {tag} | {r['payoff']:+.3f} [{r['payoff_ci'][0]:+.3f}, {r['payoff_ci'][1]:+.3f}] | "
                         f"{r['win']:.3f} [{r['win_ci'][0]:.3f}, {r['win_ci'][1]:.3f}] | {r['draw']:.3f} | "
                         f"{r['invalid']:.3f} | {r['invalid_strict']:.3f} |")
    return "\n".join(lines)


def probe_table(probe: dict) -> str:
    lines = ["| instruction | game | limit | strict legal [95% CI] | lenient legal [95% CI] | cut at the limit | "
             "tokens |", "|---|---|---|---|---|---|---|"]
    for name, one in (probe["prompts"] if "prompts" in probe else {"upstream": probe}).items():
        for g, by in one["per_game"].items():
            for lim, r in by.items():
                lines.append(f"| {name} | {g} | {lim} | {r['strict']:.1%} [{r['strict_wilson95'][0]:.1%}, "
                             f"{r['strict_wilson95'][1]:.1%}] | {r['lenient']:.1%} [{r['lenient_wilson95'][0]:.1%}, "
                             f"{r['lenient_wilson95'][1]:.1%}] | {r['cut']:.1%} | {r['tokens_mean']:.0f} |")
    return "\n".join(lines) + f"\n\nDecision: {probe['decision']['why']}"


def report(a, out: Path, post: dict, settings: dict) -> str:
    import transfer

    probe = json.loads((out / "probe.json").read_text())
    parts = [f"# SPIRAL on {a.model}: results (written by run.py)", "",
             f"Settings: `{json.dumps(settings)}`", "", "## Probe (training material, untrained model)", "",
             probe_table(probe), "", "## Games", "", games_tables(out, post["models"], a.games.split(","))]
    if (out / "exploit_ci.md").exists():
        parts += ["", "## Kuhn exploitability", "", (out / "exploit_ci.md").read_text().strip()]
    parts += ["", "## Math transfer (greedy pass@1, paired by problem)", "", transfer.table(post["math"]),
              "", f"Stage wall times (s): `{json.dumps(post['post_wall_s'])}`"]
    text = "\n".join(parts) + "\n"
    (out / "results_stronger.md").write_text(text)
    return text


def export(out: Path, dest: Path) -> list[Path]:
    """Per-item results without any text into ``dest`` (e.g. experiments/spiral/items/qwen): games and
    probe files as they are (they hold no model or data text), math evaluations reduced to their 0/1
    vectors and lengths, exploitability samples (parsed actions), the report and the arms' metrics."""
    keep = ("tag", "step", "n", "k", "tokens", "truncated", "boxed", "correct_boxed", "correct_number", "times")
    written = []

    def put(rel: str, text: str) -> None:
        p = dest / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        written.append(p)

    for src in sorted((out / "games").glob("*.json")):
        put(f"games/{src.name}", src.read_text())
    for src in sorted((out / "math" / "eval").glob("*.json")):
        r = json.loads(src.read_text())
        put(f"math/{src.name}", json.dumps({k: r[k] for k in keep if k in r}, separators=(",", ":")) + "\n")
    for src in sorted((out / "math" / "data").glob("*.jsonl")):  # where problem i came from, no text
        rows = [json.loads(x)["source"] for x in src.read_text().splitlines()]
        put(f"math/sources_{src.stem}.json", json.dumps(rows) + "\n")
    for name in ("probe.json", "exploit_samples.json", "exploit_ci.json", "exploit_ci.md", "results_stronger.md",
                 "setup.json"):
        if (out / name).exists():
            put(name, (out / name).read_text())
    for m in sorted(out.glob("*/metrics.jsonl")):
        put(f"{m.parent.name}/metrics.jsonl", m.read_text())
    return written


def plot_lengths(out: Path, arms: list[str], title: str) -> None:
    """curves_length.png: the training side's answer length, cut share and invalid-move rate per step,
    the signals that showed the first plan's policies dropping their reasoning."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [("response/length_mean", "answer tokens (mean)"), ("response/truncated_frac", "answers cut"),
            ("spiral/invalid_rate", "invalid moves")]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), layout="constrained")
    for arm in arms:
        rows = [json.loads(x) for x in (out / arm / "metrics.jsonl").read_text().splitlines()]
        for ax, (key, label) in zip(axes, keys):
            pts = [(r["step"], r[key]) for r in rows if key in r]
            ax.plot([s for s, _ in pts], [v for _, v in pts], marker="o", label=arm)
            ax.set_xlabel("training step")
            ax.set_ylabel(label)
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.savefig(out / "curves_length.png", dpi=110)
