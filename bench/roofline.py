"""How far each stage of a SeRL step runs from this machine's limit (issue 35 §2).

    flock /tmp/vllm.lock env MALLOC_ARENA_MAX=2 python bench/roofline.py --run      # both models, 3 steps
    python bench/roofline.py --measured bench/results.jsonl     # from serl_step.py records made before

1. The limits, measured here: matmul peak (torch.mm, bf16 and fp32, square and the models'
   [tokens x hidden] @ [hidden x ffn] shapes; median of --reps after a warm-up) and memory
   bandwidth (copy and triad over arrays far larger than the caches; median GB/s).
2. The work of each stage from config.json (pure functions, no torch): FLOPs, and the bytes
   that must cross the memory bus at least once. Roofline time = the sum over the stage's
   phases of max(FLOPs / peak, bytes / bandwidth): activations and logits are left out of the
   bytes, so the roofline rate is an upper bound.
3. Measured times and token counts: serl_step.py's records (metrics.jsonl's ``time/*`` and
   counts), summed over the steps after --skip; ratio = roofline time / measured time.

A forward pass costs 2 FLOPs per weight a token multiplies (Kaplan et al. 2020, §2.1) plus
attention's two context matmuls, 2 * ctx * d_attn each per layer (Hoffmann et al. 2022,
Appendix F); backward twice the forward (6N to train), less the weight gradients that LoRA's
frozen base skips; gradient checkpointing adds a forward. bench/README.md has the table.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from _common import RESULTS, append_result, cpu_model, machine

# The configurations a row can be: name -> (model, serl_step.py --task, --flags). The first two are
# issue 35's; "qwen-gsm8k" is the efficacy experiment's third-round step (issue 46) as it now runs:
# its task flags (LoRA 32, 384 tokens, micro-batches of 4) with the KL term off (bench/README.md).
CONFIGS = {
    "smollm2": ("smollm2", "arith", ""),
    "qwen2.5-coder-0.5b": ("qwen2.5-coder-0.5b", "arith",
                           "--lora_rank 32 --lora_alpha 64 --init_kl_coef 1e-4 --actor_learning_rate 5e-5 "
                           "--micro_train_batch_size 8 --gradient_checkpointing false --vllm_kv_cache_gib 0.5 "
                           "--instruction_one_call true"),
    "qwen-gsm8k": ("qwen2.5-coder-0.5b", "gsm8k_2step", "--init_kl_coef 0"),
}


def config_of(name: str) -> tuple[str, str, str]:
    """(model, task, flags) of a configuration; any other name is a model with serl_step's defaults."""
    return CONFIGS.get(name, (name, "arith", ""))
ADAM_BYTES = 28  # AdamW, fp32: read master, grad, m, v (16); write master, m, v (12)
ENGINE_BYTES = 2  # vLLM in bf16 (records before issue 59, when VLLMGenerator's dtype was fixed), its KV cache too


# ---- 1. the work, from config.json --------------------------------------------------------
@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    tied: bool

    @classmethod
    def from_config(cls, c: dict) -> "Shape":
        heads = c["num_attention_heads"]
        return cls(c["num_hidden_layers"], c["hidden_size"], heads, c.get("num_key_value_heads", heads),
                   c.get("head_dim") or c["hidden_size"] // heads, c["intermediate_size"], c["vocab_size"],
                   bool(c.get("tie_word_embeddings", False)))

    def layer_linears(self) -> list[tuple[int, int]]:
        """(in, out) of each linear of a layer: q, k, v, o and the gated MLP's gate, up, down."""
        h, a, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return [(h, a), (h, kv), (h, kv), (a, h), (h, self.ffn), (h, self.ffn), (self.ffn, h)]

    def body(self) -> int:
        """Weights of every layer's linears (norms and biases left out)."""
        return self.layers * sum(i * o for i, o in self.layer_linears())

    def head(self) -> int:
        """The LM head, needed only where a token is predicted (serl and vLLM skip the rest)."""
        return self.vocab * self.hidden

    def matmul_params(self) -> int:
        """Weights a predicted token multiplies (the input embedding is a lookup)."""
        return self.body() + self.head()

    def stored_params(self) -> int:
        return self.matmul_params() + (0 if self.tied else self.head())

    def lora_params(self, rank: int) -> int:
        """A rank-r adapter on every linear but the head (serl's default, peft's all-linear)."""
        return self.layers * sum(rank * (i + o) for i, o in self.layer_linears())

    def attn_flops(self, ctx: float) -> float:
        """QK^T and softmax @ V of one token against ``ctx`` earlier ones, all layers."""
        return 4 * self.layers * self.heads * self.head_dim * ctx

    def kv_bytes(self, ebytes: int = ENGINE_BYTES) -> int:
        """K and V of one token, all layers, in the engine's dtype (``ebytes`` per number)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * ebytes


def generation_work(s: Shape, calls: float, prompts: float, prompt_tokens: float, seqs: float,
                    gen_tokens: float, ebytes: int = ENGINE_BYTES) -> list[tuple[float, float]]:
    """(FLOPs, bytes) of the prefill and the decode of ``calls`` engine calls. A prompt is
    prefilled once for all its samples (prefix cache), without the head (its last logits are
    the first answer token's); at decode every step reads the weights once for the call's
    ``seqs / calls`` sequences, and each sequence its KV cache."""
    p, g = prompt_tokens / max(prompts, 1), gen_tokens / max(seqs, 1)  # mean lengths
    w = s.matmul_params() * ebytes
    prefill = (prompt_tokens * (2 * s.body() + s.attn_flops((p + 1) / 2)),
               calls * w + prompt_tokens * s.kv_bytes(ebytes))
    ctx = p + (g + 1) / 2  # mean context of a generated token
    batch = max(seqs / max(calls, 1), 1)
    decode = (gen_tokens * (2 * s.matmul_params() + s.attn_flops(ctx)),
              gen_tokens / batch * w + gen_tokens * s.kv_bytes(ebytes) * (ctx + 1))
    return [prefill, decode]


def forward_work(s: Shape, tokens: float, answers: float, seqs: float, micro: int, passes: int, wbytes: int
                 ) -> list[tuple[float, float]]:
    """(FLOPs, bytes) of ``passes`` scoring passes over ``seqs`` sequences of ``tokens`` in
    all (the head on the ``answers`` only), in micro-batches of ``micro`` sequences, each
    reading the weights once."""
    ctx = (tokens / max(seqs, 1) + 1) / 2
    flops = tokens * (2 * s.body() + s.attn_flops(ctx)) + answers * 2 * s.head()
    return [(flops, math.ceil(seqs / micro) * s.matmul_params() * wbytes)] * passes


def update_work(s: Shape, tokens: float, answers: float, seqs: float, micro: int, opt_steps: float, wbytes: int,
                lora_rank: int = 0, checkpointing: bool = False) -> list[tuple[float, float]]:
    """(FLOPs, bytes) of forward + backward over every micro-batch and the AdamW steps.
    Backward = input gradients (2 per weight) + weight gradients (2 per weight, none for
    LoRA's frozen base); the head on the ``answers`` only, and not recomputed by
    checkpointing; the adapters cost 6 per adapter weight. Bytes: each pass reads the
    weights; fp32 gradients are read and written per micro-batch; AdamW per step."""
    ctx = (tokens / max(seqs, 1) + 1) / 2
    fwd, full = 1 + checkpointing, 0 if lora_rank else 1
    trained = s.lora_params(lora_rank) if lora_rank else s.stored_params()
    flops = (2 * (tokens * s.body() * (fwd + 1 + full) + answers * s.head() * (2 + full))
             + tokens * (s.attn_flops(ctx) * (fwd + 2) + 6 * (trained if lora_rank else 0)))
    micros = math.ceil(seqs / micro)
    passes = micros * (s.matmul_params() * wbytes * (fwd + 1) + trained * 8)
    optimizer = opt_steps * trained * (ADAM_BYTES + (wbytes if wbytes < 4 else 0))  # + the bf16 copy
    return [(flops, passes + optimizer)]


def sync_work(s: Shape, wbytes: int, lora_rank: int = 0, ebytes: int = ENGINE_BYTES) -> list[tuple[float, float]]:
    """One push: read the learner's weights, write the engine's (``ebytes`` each); under LoRA each
    adapted weight is first merged (W + B @ A: 2 * rank FLOPs per weight)."""
    flops = 2 * lora_rank * s.body()
    return [(flops, s.stored_params() * (wbytes + ebytes))]


def roofline_seconds(work: list[tuple[float, float]], peak: float, bandwidth: float) -> dict[str, float]:
    """Seconds each phase needs at the limit, summed by what bounds it."""
    out = {"compute": 0.0, "memory": 0.0}
    for flops, nbytes in work:
        tc, tm = flops / peak, nbytes / bandwidth
        out["compute" if tc >= tm else "memory"] += max(tc, tm)
    return out


# ---- 2. the stages of a step, from serl_step.py's record ------------------------------------
def flag(argv: list[str], name: str, default):
    """The last value of ``--name`` in a command line, typed like ``default``."""
    vals = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == f"--{name}"]
    if not vals:
        return default
    return vals[-1].lower() == "true" if isinstance(default, bool) else type(default)(vals[-1])


def settings(command: str, precision: dict | None = None) -> dict:
    """What the work depends on among a run's flags (serl's defaults where a flag is absent);
    ``wbytes``: the learner's weights, bf16 with --bf16 (fp32 masters in the optimizer); ``ebytes``: the
    engine's. ``precision``: RUN_DIR/precision.json's choice where the record has it (--bf16 auto)."""
    a = shlex.split(command)
    if precision:
        wbytes, ebytes = (2 if precision["learner"] == "bf16" else 4), (4 if precision["generator"] == "float32" else 2)
    else:  # older records: --bf16 true/false, and the engine always in bf16
        wbytes, ebytes = (2 if str(flag(a, "bf16", "false")).lower() in ("true", "1", "yes") else 4), ENGINE_BYTES
    return {"n": flag(a, "n_samples_per_prompt", 1), "micro": flag(a, "micro_train_batch_size", 4),
            "lora": flag(a, "lora_rank", 0), "wbytes": wbytes, "ebytes": ebytes,
            "ckpt": flag(a, "gradient_checkpointing", False), "max_len": flag(a, "generate_max_len", 1024),
            "batch": flag(a, "rollout_batch_size", 1), "kl": flag(a, "init_kl_coef", 0.0) > 0}


def step_stages(s: Shape, c: dict, times: dict, st: dict) -> dict[str, tuple]:
    """stage -> (measured s, units of work, unit, engine?, [(FLOPs, bytes)], notes) of one step
    from its counts ``c`` and ``times``; a count the record lacks is estimated, and said so."""
    def count(key, fallback, how):
        if c.get(key) is None:
            notes.append(f"no {key}: {how}")
            return fallback
        return c[key]

    out, mean, rounds, lw = {}, c.get("response/length_mean"), c.get("filter/rounds") or 1, st["wbytes"]
    notes: list[str] = []
    comps, gen = c.get("instruct/completions") or 0, c.get("instruct/gen_tokens") or 0
    prompt = count("instruct/prompt_tokens", 0, "prefill left out")
    out["self-instruction"] = (times.get("instruct", 0), gen, "tokens", True,
                               generation_work(s, c.get("instruct/attempts") or 1, comps, prompt, comps, gen, st["ebytes"]), notes)
    notes = []
    rolled = count("batch/rolled_out", st["batch"] * rounds, "--rollout_batch_size x rounds")
    seqs = rolled * st["n"]
    gen = count("rollout/gen_tokens", seqs * (st["max_len"] if mean is None else mean), "answers x mean length")
    prompt = count("rollout/prompt_tokens", 0, "prefill left out")
    out["rollout"] = (times.get("generate", 0), gen, "tokens", True,
                      generation_work(s, rounds, rolled, prompt, seqs, gen, st["ebytes"]), notes)
    notes = []
    scored = count("train/batch_prompts", st["batch"], "--rollout_batch_size") * st["n"]
    answers = count("train/logprob_answer_tokens", scored * (mean or 0), "answers x mean length")
    tokens = count("train/logprob_tokens", answers, "answers only, prompts left out")
    passes = int(count("train/logprob_passes", 2 if st["kl"] else 0, "2 if --init_kl_coef > 0"))
    out["log-probs"] = (times.get("logprobs", 0), tokens * passes, "tokens", False,
                        forward_work(s, tokens, answers, scored, st["micro"], passes, lw), notes)
    notes = []
    seqs = c.get("train/sequences") or 0
    answers = count("actor/tokens", seqs * (mean or 0), "sequences x mean length")
    tokens = count("train/tokens", answers, "answers only, prompts left out")
    out["update"] = (times.get("learner", 0), tokens, "tokens", False, update_work(
        s, tokens, answers, seqs, st["micro"], c.get("actor/steps") or 1, lw, st["lora"], st["ckpt"]), notes)
    out["weight sync"] = (times.get("sync", 0), s.stored_params() / 1e6, "M weights", False,
                          sync_work(s, lw, st["lora"], st["ebytes"]), [])
    return out


def stage_rows(s: Shape, record: dict, peaks: dict, bandwidth: float, skip: int = 0) -> list[dict]:
    """Measured against roofline rate of each stage, summed over the record's steps after
    ``skip``. ``peaks``: FLOP/s by dtype; the engine computes in bf16, the learner in its own."""
    st, counts, times = settings(record["command"], record.get("precision")), record["counts"], record["per_step_s"]
    learner_peak = peaks["bf16" if st["wbytes"] == 2 else "fp32"]
    engine_peak = peaks["bf16" if st["ebytes"] == 2 else "fp32"]
    acc: dict[str, dict] = {}
    for i in range(skip, len(times)):
        c = {k: (v[i] if i < len(v) else None) for k, v in counts.items()}
        for name, (secs, units, unit, engine, work, notes) in step_stages(s, c, times[i], st).items():
            if secs <= 0 or units <= 0:
                continue  # the stage did not run in this step
            roof = roofline_seconds(work, engine_peak if engine else learner_peak, bandwidth)
            a = acc.setdefault(name, {"unit": unit, "units": 0.0, "seconds": 0.0, "compute": 0.0, "memory": 0.0,
                                      "notes": set()})
            a.update(units=a["units"] + units, seconds=a["seconds"] + secs, compute=a["compute"] + roof["compute"],
                     memory=a["memory"] + roof["memory"])
            a["notes"].update(notes)
    acc["step"] = {"unit": "steps", "units": float(len(times) - skip), "notes": set(),
                   "seconds": sum(t.get("step", 0.0) for t in times[skip:]),
                   "compute": sum(a["compute"] for a in acc.values()), "memory": sum(a["memory"] for a in acc.values())}
    if acc["step"]["seconds"] <= 0:
        del acc["step"]  # a record without time/step
    rows = []
    for name, a in acc.items():
        roof = a["compute"] + a["memory"]  # > 0: every stage moves bytes
        rows.append({"model": record["model"], "stage": name, "unit": a["unit"], "measured_s": a["seconds"],
                     "roofline_s": roof, "measured_per_s": a["units"] / a["seconds"],
                     "roofline_per_s": a["units"] / roof, "ratio": roof / a["seconds"],
                     "bound": "compute" if a["compute"] >= a["memory"] else "memory",
                     "notes": "; ".join(sorted(a["notes"]))})
    return rows


def num(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def markdown(rows: list[dict]) -> str:
    lines = ["| model | stage | measured rate /s | bound | roofline rate /s | measured / roofline | notes |",
             "|---|---|---:|---|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['stage']} | {num(r['measured_per_s'])} {r['unit']} | {r['bound']} | "
                     f"{num(r['roofline_per_s'])} {r['unit']} | {r['ratio']:.1%} | {r['notes']} |")
    return "\n".join(lines)


def furthest(rows: list[dict]) -> str:
    """The sentence for the row with the lowest measured / roofline ratio."""
    r = min(rows, key=lambda r: r["ratio"])
    return (f"Furthest from its limit: {r['model']} {r['stage']}, at {r['ratio']:.1%} of its roofline "
            f"({r['bound']}-bound: {num(r['measured_per_s'])} against {num(r['roofline_per_s'])} {r['unit']}/s).")


# ---- 3. the machine's limits (torch only here) ----------------------------------------------
def timed_median(fn, reps: int) -> float:
    fn()  # warm-up: kernel choice, first touch of memory
    return statistics.median(timed(fn) for _ in range(reps))


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure_limits(shapes: list[Shape], reps: int, stream_mib: int) -> dict:
    import torch

    mm = {}
    sizes = [(n, n, n) for n in (1024, 2048)]
    sizes += [(t, s.hidden, s.ffn) for s in shapes for t in (64, 2048)]  # decode batch; a packed micro-batch
    for dtype, name in ((torch.bfloat16, "bf16"), (torch.float32, "fp32")):
        for m, k, n in sizes:
            a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
            mm[f"{name} {m}x{k} @ {k}x{n}"] = 2 * m * k * n / timed_median(lambda: torch.mm(a, b), reps)
    n = stream_mib * 2 ** 20 // 4
    x, y, z = torch.rand(n), torch.rand(n), torch.empty(n)
    copy = 2 * n * 4 / timed_median(lambda: z.copy_(x), reps)
    triad = 3 * n * 4 / timed_median(lambda: torch.add(x, y, alpha=3.0, out=z), reps)
    peak = {d: max(v for k, v in mm.items() if k.startswith(d)) for d in ("bf16", "fp32")}
    return {"matmul_flops_per_s": mm, "peak_flops_per_s": peak, "copy_bytes_per_s": copy,
            "triad_bytes_per_s": triad, "bandwidth_bytes_per_s": max(copy, triad),
            "threads": torch.get_num_threads(), "stream_mib": stream_mib}


def print_limits(lim: dict) -> None:
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; torch threads {lim['threads']}")
    for k, v in lim["matmul_flops_per_s"].items():
        print(f"  matmul {k:<28} {v / 1e9:8.1f} GFLOP/s")
    print(f"  peak: bf16 {lim['peak_flops_per_s']['bf16'] / 1e9:.1f}, fp32 {lim['peak_flops_per_s']['fp32'] / 1e9:.1f}"
          f" GFLOP/s; bandwidth: copy {lim['copy_bytes_per_s'] / 1e9:.1f}, triad {lim['triad_bytes_per_s'] / 1e9:.1f}"
          f" GB/s ({lim['stream_mib']} MiB arrays)")


# ---- the command -----------------------------------------------------------------------------
def load_records(path, models: list[str], label: str | None = None) -> dict[str, dict]:
    """The last serl_step.py record of each configuration in ``models`` in a JSONL file: its
    ``roofline-NAME`` record, or for a name that is a model, any record of that model
    (``label``: only records with that label)."""
    p = Path(path)
    if not p.is_file():
        raise SystemExit(f"{path}: not found")
    out = {}
    for lineno, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            raise SystemExit(f"{path}:{lineno}: not JSON ({e.msg})") from None
        if r.get("bench") != "serl_step" or label not in (None, r.get("label")):
            continue
        name = next((m for m in models if r.get("label") == f"roofline-{m}"), None) or next(
            (m for m in models if config_of(m)[:2] == (r.get("model"), r.get("task", "arith"))), None)
        if name is None:
            continue
        missing = [k for k in ("command", "counts", "per_step_s") if k not in r]
        if missing:
            raise SystemExit(f"{path}:{lineno}: a serl_step record without {', '.join(missing)}")
        out[name] = r
    return out


def model_shape(name: str) -> Shape:
    from serl.models.resolve import resolve_model

    return Shape.from_config(json.loads((Path(resolve_model(name)) / "config.json").read_text()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--run", action="store_true", help="run serl_step.py for each model first")
    src.add_argument("--measured", help="a JSONL of serl_step.py records (the last one per model is read)")
    ap.add_argument("--models", default="smollm2,qwen2.5-coder-0.5b,qwen-gsm8k",
                    help=f"configurations ({', '.join(CONFIGS)}) or models (serl_step's arith settings)")
    ap.add_argument("--steps", type=int, default=3, help="with --run: serl_step.py --steps")
    ap.add_argument("--skip", type=int, default=1, help="steps left out at the start (warm-up)")
    ap.add_argument("--reps", type=int, default=5, help="timed repeats of each limit measurement")
    ap.add_argument("--stream_mib", type=int, default=256, help="size of each bandwidth array")
    ap.add_argument("--out", default=None, help="JSONL to append to (default bench/results.jsonl)")
    args = ap.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    shapes = {m: model_shape(config_of(m)[0]) for m in models}
    lim = measure_limits(list(shapes.values()), args.reps, args.stream_mib)
    print_limits(lim)
    out = args.out or RESULTS
    if args.run:
        import serl_step  # bench/ is on sys.path: this script's folder

        records = {}
        for m in models:  # one run at a time: each holds a vLLM engine and a learner
            label = f"roofline-{m}"
            model, task, flags = config_of(m)
            serl_step.main(["--label", label, "--model", model, "--task", task, "--steps", str(args.steps),
                            "--flags", flags, "--out", str(out)])
            records.update(load_records(out, [m], label))
    else:
        records = load_records(args.measured, models)
    rows = []
    for m in models:
        if m not in records:
            print(f"no serl_step record for {m}: left out")
            continue
        if records[m].get("machine", machine()) != machine():  # the limits are this machine's
            print(f"warning: {m}'s record was made on {records[m]['machine']}, the limits here on {machine()}")
        rows += [dict(r, model=m) for r in  # the configuration's name: two may share a model
                 stage_rows(shapes[m], records[m], lim["peak_flops_per_s"], lim["bandwidth_bytes_per_s"], args.skip)]
    if not rows:
        raise SystemExit("no stage had a measured time: nothing to compare")
    print("\n" + markdown(rows))
    findings = [furthest([r for r in rows if r["model"] == m]) for m in models if any(r["model"] == m for r in rows)]
    print("\n" + "\n".join(findings) + ("\nOverall: " + furthest(rows) if len(findings) > 1 else ""))
    append_result({"bench": "roofline", "models": models, "skip": args.skip, "limits": lim,
                   "sources": {m: {"label": r.get("label"), "date": r.get("date"), "steps": r.get("steps")}
                               for m, r in records.items()},
                   "rows": rows, "findings": findings, "overall": furthest(rows)}, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
