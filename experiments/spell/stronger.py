"""The stronger-model plan of the SPELL experiment (issue 33), driven by run.py (``--plan stronger``,
the default for any --model but the embedded one).

Stages, each cached in --out so that ``run.py --resume`` redoes only what is missing:
  probe_verifier.json, probe_questioner.json   the untrained model on training-side material: fixes
                                               the two prefills, and measures the verifier's calibration
  warmup/, probe_verifier_after_warmup.json    only when the verifier is not calibrated: the verifier
                                               warm-up (``--verifier_warmup_steps``, labelled pairs of the
                                               training clusters), its merged model, the probe again
  full/, frozen_verifier/, ...                 the training runs (each evaluates itself greedily on the
                                               held-out files before and after training); after a
                                               warm-up they start from its merged model
  results_stronger.{md,json}                   every arm against no training and against each other

Arms. ``full``: the three-role recipe. ``frozen_verifier``: the same, with the verifier never
trained (``--verifier_band 0 0``: no majority share lies in [0, 0]), so it keeps judging, and its
YES still lifts the responder's reward, but it does not co-evolve. That is the control the current
library can express without a code change, and it isolates the part that failed on SmolLM2 (the
verifier never trained there). ``no_training``: the untrained model, i.e. the step-0 evaluation
(greedy, so both runs' step-0 evaluations are identical; the report checks this). After a warm-up,
no training is the warm-up run's step-0 evaluation, and "warm-up only" its last one. Two more
controls can be named in ``--arms``: ``no_verifier_reward`` (``--responder_reward rule``: the
responder is rewarded by the rule score alone; the verifier still judges and trains) and
``no_memory`` (``--memory_capacity 0``: no history memory).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

ARMS = {"full": [], "frozen_verifier": ["--verifier_band", "0", "0"], "no_training": None,
        "no_verifier_reward": ["--responder_reward", "rule"], "no_memory": ["--memory_capacity", "0"]}
# Fixed before any Qwen run (README, "Plan for the Qwen run"): the SmolLM2 run's sizes (10 steps of 8
# clusters, responder 8 samples, verifier 3 judgments, grounding 4, 2 refill rounds), longer replies
# (128 new tokens for questioner and responder, 48 for the verifier), compact prompts (the model has
# 0.5B parameters), questioner temperature 0.7, LoRA rank 32 / alpha 64 at 2e-5 (10x the SmolLM2 run's
# full fine-tuning rate; Schulman et al., "LoRA Without Regret", Thinking Machines 2025), bf16, all
# held-out items. The two prefills come from the probe.
FULL = ["--steps", "10", "--rollout_batch_size", "8", "--n_samples_per_prompt", "8", "--verifier_samples", "3",
        "--grounding_samples", "4", "--max_refill_rounds", "2", "--compact_prompts", "true",
        "--questioner_temperature", "0.7", "--few_shot_questioner", "false",
        "--questioner_max_len", "128", "--generate_max_len", "128", "--verifier_max_len", "48",
        "--prompt_max_len", "1024", "--actor_learning_rate", "2e-5", "--temperature", "1.0", "--bf16", "auto",
        "--eval_qa_limit", "0", "--eval_verify_limit", "0", "--eval_questioner_limit", "20"]
SMOKE = ["--steps", "2", "--rollout_batch_size", "2", "--n_samples_per_prompt", "2", "--verifier_samples", "2",
         "--grounding_samples", "1", "--max_refill_rounds", "1", "--compact_prompts", "true",
         "--questioner_temperature", "0.7", "--few_shot_questioner", "false", "--questioner_max_len", "48",
         "--generate_max_len", "48", "--verifier_max_len", "24", "--prompt_max_len", "1024",
         "--actor_learning_rate", "2e-5", "--eval_qa_limit", "8", "--eval_verify_limit", "8",
         "--eval_questioner_limit", "2"]
LORA = ["--lora_rank", "32", "--lora_alpha", "64", "--vllm_kv_cache_gib", "0.5", "--micro_train_batch_size", "4"]
# The verifier warm-up, run only when the probe finds the verifier uncalibrated (README, "Verifier
# warm-up"; fixed after the Qwen probe, before any training or held-out number): 16 steps of 16
# labelled pairs of the training clusters (dataset/docs_train_verify.jsonl: 288 rule-right, 288
# rule-wrong), half right and half wrong, 8 verdicts each at temperature 1.0 (one GRPO group per
# pair), the arms' learner (LoRA rank 32, 2e-5, bf16) and verifier prompt, prefill and length.
# 16 x 16 = 256 pairs: no pair twice; ~128 short sequences a step.
WARMUP = ["--verifier_warmup_steps", "16", "--verifier_warmup_pairs", "16", "--verifier_warmup_samples", "8"]
WARMUP_SMOKE = ["--verifier_warmup_steps", "2", "--verifier_warmup_pairs", "2", "--verifier_warmup_samples", "4"]
PROBE = dict(verifier_n=120, questioner_n=48)
PROBE_SMOKE = dict(verifier_n=6, questioner_n=3)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def probes(a, out: Path) -> dict:
    """Run (or read) the two probes; the decision: each prefill on when it gives more valid replies
    than none (greedy verifier on labelled items of a seed-7 corpus; questioner at 0.7 on the
    training clusters), and the verifier's calibration under the chosen prefill."""
    import probe_json
    import probe_verifier

    sizes = PROBE_SMOKE if a.smoke else PROBE
    pv, pq = out / "probe_verifier.json", out / "probe_questioner.json"
    if not pv.exists():
        log(f"probe: verifier, {sizes['verifier_n']} items, prefills '' and '[['")
        probe_verifier.main(["--model", a.model, "--n", str(sizes["verifier_n"]), "--prefill", "", "--prefill", "[[",
                             "--temperature", "0", "--max_new_tokens", "24" if a.smoke else "48",
                             "--generator", a.generator, "--out", str(pv)])
    if not pq.exists():
        rows = []
        for prefill in (False, True):
            log(f"probe: questioner, {sizes['questioner_n']} clusters, prefill {prefill}")
            ns = SimpleNamespace(model=a.model, corpus=str(HERE.parents[1] / "dataset/docs_train.jsonl"), n=sizes["questioner_n"],
                                 paragraphs=2, full=False, few_shot=False, prefill=prefill, stop=[], temperature=0.7,
                                 max_new_tokens=48 if a.smoke else 128, generator=a.generator, seed=0, show=0, dump="")
            r = probe_json.run(ns)
            r.pop("examples", None)  # model text stays out of the file
            rows.append(r)
        pq.write_text(json.dumps({"model": a.model, "variants": rows}, indent=1) + "\n")
    v = json.loads(pv.read_text())["variants"]
    q = json.loads(pq.read_text())["variants"]
    by_v = {r["prefill"]: r for r in v}
    by_q = {r["prefill"]: r for r in q}
    vp = "on" if by_v["[["]["valid_rate"] > by_v[""]["valid_rate"] else "off"
    qp = "on" if by_q[True]["valid_json_rate"] > by_q[False]["valid_json_rate"] else "off"
    chosen = by_v["[[" if vp == "on" else ""]
    return {"verifier_prefill": vp, "questioner_prefill": qp, "calibrated": chosen["calibrated"],
            "calibration": {k: chosen[k] for k in ("bad_format", "yes_if_rule_right", "yes_if_rule_wrong", "gap",
                                                   "agree_with_rule", "accuracy_all")},
            "valid": {"verifier": {p or "none": r["valid_rate"] for p, r in by_v.items()},
                      "questioner": {str(p): r["valid_json_rate"] for p, r in by_q.items()}}}


def reprobe(a, out: Path, model: str, prefill: str) -> dict:
    """The verifier probe again (same items, greedy, the chosen prefill) on ``model``."""
    import probe_verifier

    sizes = PROBE_SMOKE if a.smoke else PROBE
    path = out / "probe_verifier_after_warmup.json"
    if not path.exists():
        log(f"probe after the warm-up: verifier, {sizes['verifier_n']} items, prefill {prefill!r}")
        probe_verifier.main(["--model", model, "--n", str(sizes["verifier_n"]), "--prefill", prefill,
                             "--temperature", "0", "--max_new_tokens", "24" if a.smoke else "48",
                             "--generator", a.generator, "--out", str(path)])
    (row,) = json.loads(path.read_text())["variants"]
    return {"calibrated": row["calibrated"],
            "calibration": {k: row[k] for k in ("bad_format", "yes_if_rule_right", "yes_if_rule_wrong", "gap",
                                                "agree_with_rule", "accuracy_all")}}


def with_steps(flags: list[str], steps: int) -> list[str]:
    i = flags.index("--steps")
    return flags[:i] + ["--steps", str(steps)] + flags[i + 2:]


def train(out: Path, name: str, fresh: list[str]) -> Path:
    """Run (or resume, or keep) one ``serl train`` stage in OUT/NAME; its wall time and memory to timing.jsonl."""
    import resource
    import subprocess

    from analysis import ROOT

    run = out / name
    if (run / "report" / "summary.md").is_file():
        log(f"{name}: finished earlier, kept")
        return run
    cmd = ["--resume", str(run)] if (run / "config.yaml").is_file() else ["--run_dir", str(run), *fresh]
    log(f"{name}: serl train {' '.join(cmd[:4])} ...")
    t1 = time.time()
    r = subprocess.run([sys.executable, "-m", "serl.cli", "train", *cmd], cwd=ROOT)
    with open(out / "timing.jsonl", "a") as f:  # the largest resident set of any finished child so far (KiB)
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2 ** 20
        f.write(json.dumps({"arm": name, "wall_s": round(time.time() - t1, 1), "rc": r.returncode,
                            "max_child_rss_gib": round(rss, 2)}) + "\n")
    if r.returncode:
        raise SystemExit(f"{name}: serl train exited with {r.returncode}; rerun with --resume")
    return run


def warm_up(a, out: Path, flags: list[str], decision: dict) -> str:
    """The warm-up stage: a run of only warm-up steps (held-out evaluation before and after), its
    merged model, and the probe again on it. Returns the model the arms start from."""
    warm = WARMUP_SMOKE if a.smoke else WARMUP
    run = train(out, "warmup", ["--recipe", "spell", "--model", a.model, "--generator", a.generator,
                                "--progress", "plain", *with_steps(flags, int(warm[1])), *warm,
                                "--save_merged", "true"])
    model = str(run / "model_merged")
    decision["after_warmup"] = reprobe(a, out, model, "[[" if decision["verifier_prefill"] == "on" else "")
    return model


# per held-out item: which role's records, and the value scored
ITEM = {"responder_strict": ("responder", lambda r: float(r["strict"])),
        "responder_lenient": ("responder", lambda r: float(r["lenient"])),
        "verifier_accuracy": ("verifier", lambda r: float(r["judgment"] == r["label"])),
        "verifier_bad_format": ("verifier", lambda r: float(r["judgment"] == -1))}


def values(run: Path, step: int) -> dict[str, list[float]]:
    from analysis import read_records

    recs = read_records(run / "spell_eval" / f"step_{step}.jsonl")
    return {k: [fn(r) for r in recs[role]] for k, (role, fn) in ITEM.items()}


def questioner(run: Path, step: int) -> dict:
    got = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["step"] == step:
            got |= {k.split("/")[-1]: v for k, v in rec.items() if k.startswith("eval/questioner/")}
    return {f"questioner_{k}": got.get(k) for k in ("valid_json", "bad_ground")}


def compare(run_a: Path, run_b: Path, step_a: int, step_b: int) -> dict:
    """Per-item paired changes between two evaluations (run_b@step_b minus run_a@step_a)."""
    from analysis import paired

    va, vb = values(run_a, step_a), values(run_b, step_b)
    return {k: paired(va[k], vb[k]) for k in ITEM}


def last_step(run: Path) -> int:
    return max(int(p.stem.split("_")[1]) for p in (run / "spell_eval").glob("step_*.jsonl"))


def report(a, out: Path, arms: list[str], decision: dict) -> str:
    """The table: no training (the untrained model's step-0 evaluation: the warm-up run's when there
    was one), warm-up only, and each trained arm after training, each change paired by item."""
    from analysis import analyse, rate

    trained = [x for x in arms if ARMS.get(x) is not None]
    res = {arm: analyse(out / arm, out / arm) for arm in trained}
    warm = out / "warmup" if (out / "warmup" / "spell_eval").is_dir() else None
    base = (warm or out / trained[0], 0)
    cols = ([("warm-up only", (warm, last_step(warm)))] if warm else []) + \
        [(f"{x} (after)", (out / x, last_step(out / x))) for x in trained]
    fmt = lambda r: f"{r['rate']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]"  # noqa: E731
    ch = lambda c: f"{c['diff']:+.3f} [{c['ci'][0]:+.3f}, {c['ci'][1]:+.3f}]"  # noqa: E731
    show = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    lines = [f"# SPELL on {a.model}: results (written by run.py)", "",
             f"Probe decision: `{json.dumps(decision)}`", "",
             "Held-out, greedy; no training = the untrained model's step-0 evaluation; changes are paired by item "
             "(95% bootstrap):", "",
             "| measure | no training | "
             + " | ".join(f"{n} | {n.split(' (')[0]} - no training" for n, _ in cols) + " |",
             "|---|---|" + "---|---|" * len(cols)]
    vb = values(*base)
    table = {"no_training": {k: rate(v) for k, v in vb.items()} | questioner(*base)}
    for name, where in cols:
        vw = values(*where)
        table[name] = {k: rate(v) for k, v in vw.items()} | questioner(*where) | {
            f"{k}_change": c for k, c in compare(*base[:1], where[0], base[1], where[1]).items()}
    for key in ITEM:
        lines.append(f"| {key} | {fmt(table['no_training'][key])} |"
                     + "".join(f" {fmt(table[n][key])} | {ch(table[n][key + '_change'])} |" for n, _ in cols))
    for key in ("questioner_valid_json", "questioner_bad_ground"):
        lines.append(f"| {key} | {show(table['no_training'][key])} |"
                     + "".join(f" {show(table[n][key])} | |" for n, _ in cols))
    if len(trained) >= 2:
        c = compare(out / trained[1], out / trained[0], last_step(out / trained[1]), last_step(out / trained[0]))
        lines += ["", f"{trained[0]} minus {trained[1]} after training (paired by item): "
                  + "; ".join(f"{k} {ch(v)}" for k, v in c.items())]
        same = compare(out / trained[0], out / trained[1], 0, 0)
        if any(v["diff"] != 0 for v in same.values()):
            lines.append("WARNING: the arms' step-0 evaluations differ; the greedy baseline is not reproducible")
    text = "\n".join(lines) + "\n"
    plot_arms(out, trained, out / "curves_stronger.png")
    (out / "results_stronger.md").write_text(text)
    (out / "results_stronger.json").write_text(json.dumps({"decision": decision, "table": table, "arms": res},
                                                          indent=1))
    return text


ARM_CURVES = ["responder/accuracy", "responder/no_answer", "responder/verifier_lift", "verifier/agreement",
              "verifier/majority_agreement", "questioner/valid_json", "time/learner", "time/step"]
WARM_CURVES = ["warmup/accuracy", "warmup/yes_if_right", "warmup/yes_if_wrong"]


def plot_arms(out: Path, arms: list[str], path: Path) -> None:
    """One figure: the warm-up's sampled-verdict curves (if it ran) and each trained arm's per-step metrics."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def series(run: Path, key: str) -> tuple[list[int], list[float]]:
        pts = [(r["step"], r[key]) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
               if isinstance(r.get(key), (int, float))]
        return [s for s, _ in pts], [v for _, v in pts]

    fig, axes = plt.subplots(3, 4, figsize=(16, 9.5), squeeze=False)
    warm = out / "warmup" / "metrics.jsonl"
    for ax, key in zip(axes[0], WARM_CURVES):
        if warm.is_file():
            ax.plot(*series(out / "warmup", key), marker="o", color="gray")
        ax.set_title(f"warm-up: {key.split('/')[1]}", fontsize=10)
    axes[0][3].axis("off")
    for ax, key in zip(axes[1:].flat, ARM_CURVES):
        for arm in arms:
            ax.plot(*series(out / arm, key), marker="o", label=arm)
        ax.set_title(key, fontsize=10)
        ax.legend(fontsize=8)
    for ax in axes.flat:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.suptitle(f"SPELL, stronger plan ({out.name}): verifier warm-up and self-play arms (sampled, training side)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def export(out: Path, dest: Path) -> list[Path]:
    """Per-item held-out results without any text (model replies and generated questions dropped;
    ``line`` points into the shipped labelled files), the probes, the report and the metrics."""
    written = []

    def put(rel: str, text: str) -> None:
        p = dest / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        written.append(p)

    for src in sorted(out.glob("*/spell_eval/step_*.jsonl")):
        rows = [{k: v for k, v in json.loads(x).items() if k not in ("reply", "qa")} for x in src.read_text().splitlines()]
        put(f"{src.parent.parent.name}/{src.name}", "".join(json.dumps(r) + "\n" for r in rows))
    for m in sorted(out.glob("*/metrics.jsonl")):
        put(f"{m.parent.name}/metrics.jsonl", m.read_text())
    for name in ("probe_verifier.json", "probe_questioner.json", "probe_verifier_after_warmup.json", "setup.json",
                 "results_stronger.md", "results_stronger.json"):
        if (out / name).exists():
            put(name, (out / name).read_text())
    if (out / "curves_stronger.png").is_file():
        (dest / "curves_stronger.png").write_bytes((out / "curves_stronger.png").read_bytes())
        written.append(dest / "curves_stronger.png")
    return written
