"""`serl eval`: math benchmarks (pass@1, maj@K, pass@K), MMLU-Pro, and games (``--games``).

All input is read and checked before the model loads; outputs are written at the
end, each file through a temporary name and a rename, so a failed run leaves no
half-written results.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

from serl import ModelError
from serl.eval.data import DataError, load_math_benchmark, load_mmlu_pro
from serl.eval.math_bench import PROMPT_STYLES
from serl.eval.shared import GeneratorUnavailable, make_generator, write_atomic

MMLU = "mmlu_pro"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="serl eval", description=__doc__.splitlines()[0])
    p.add_argument(
        "--model",
        default="smollm2",
        help="HF directory, hub id, .gguf file, 'smollm2' (the embedded default) or 'qwen2.5-coder-0.5b' (opt-in)",
    )
    p.add_argument(
        "--benchmarks", default="", help="comma-separated names: directories under --data_dir, and/or 'mmlu_pro'"
    )
    p.add_argument("--data_dir", default="", help="folder holding <name>/test.jsonl for each math benchmark")
    p.add_argument(
        "--mmlu_dir", default="", help="folder holding MMLU-Pro's test.jsonl and validation.jsonl (for 'mmlu_pro')"
    )
    p.add_argument(
        "--mmlu_split",
        default="test",
        choices=("test", "validation"),
        help="which MMLU-Pro split to evaluate (shots always come from validation)",
    )
    p.add_argument("--n_shots", type=int, default=5, help="MMLU-Pro chain-of-thought examples per prompt")
    p.add_argument(
        "--stratified",
        type=int,
        default=0,
        help="MMLU-Pro: evaluate N questions spread evenly over categories (0 = all)",
    )
    p.add_argument(
        "--limit", type=int, default=0, help="math: evaluate only the first N problems of each benchmark (0 = all)"
    )
    p.add_argument("--output_dir", required=True, help="where generations.jsonl and results.json go")
    p.add_argument(
        "--k",
        type=int,
        default=8,
        help="samples per problem for maj@K / pass@K, on top of the greedy pass@1 (default 8; 0 = greedy only)",
    )
    p.add_argument("--no_greedy", action="store_true", help="skip the greedy pass (pass@1)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature for the K samples")
    p.add_argument("--top_p", type=float, default=0.95, help="nucleus sampling for the K samples")
    p.add_argument("--max_new_tokens", type=int, default=1024, help="generation length limit")
    p.add_argument(
        "--max_model_len",
        type=int,
        default=2048,
        help="context length (vLLM); MMLU-Pro prompts get max_model_len - max_new_tokens",
    )
    p.add_argument(
        "--prompt_style",
        default="chat_boxed",
        choices=PROMPT_STYLES,
        help="raw: the question as it is; chat: chat template; chat_boxed: chat template "
        "plus 'put your final answer within \\boxed{}'",
    )
    p.add_argument(
        "--fallback",
        default="number",
        choices=("number", "none"),
        help="math: answer of a response without \\boxed{}: its last number, or none",
    )
    p.add_argument(
        "--generator",
        default="auto",
        choices=("auto", "vllm", "hf"),
        help="generation engine: vllm when installed (auto), or transformers",
    )
    p.add_argument(
        "--dtype",
        default="auto",
        choices=("auto", "bfloat16", "float16", "float32"),
        help="generator dtype: auto (bfloat16 where the hardware computes it natively, else "
        "float32; serl.engines.precision)",
    )
    p.add_argument("--batch_size", type=int, default=32, help="HF generator: sequences per forward batch")
    p.add_argument(
        "--device",
        default="auto",
        choices=("auto", "cpu", "cuda"),
        help="HF generator: where the model runs (auto: cuda when available)",
    )
    p.add_argument("--chunk", type=int, default=64, help="prompts per generate call (one progress line each)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--workers", type=int, default=1, help="math-verify worker processes")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument(
        "--show_engine_warnings",
        action="store_true",
        help="print vLLM's own log lines here instead of OUTPUT_DIR/engine.log",
    )
    from serl.config.registry import recipe_module

    recipe_module("spiral", "evaluate").add_arguments(p)  # --games and its options: SPIRAL's game evaluation
    return p


def _fail(msg: str) -> int:
    print(f"serl eval: error: {msg}", file=sys.stderr)
    return 2


def _load_inputs(args) -> tuple[list, list, list]:
    names = [n.strip() for n in args.benchmarks.split(",") if n.strip()]
    if not names:
        raise DataError("--benchmarks names no benchmark")
    math_names = [n for n in names if n != MMLU]
    problems, mmlu_q, mmlu_val = [], [], []
    if math_names:
        if not args.data_dir:
            raise DataError(f"--data_dir is needed for {', '.join(math_names)}")
        for name in math_names:
            problems += load_math_benchmark(args.data_dir, name, args.limit or None)
    if MMLU in names:
        if not args.mmlu_dir:
            raise DataError("--mmlu_dir is needed for mmlu_pro")
        from serl.eval.mmlu_pro import stratified

        mmlu_val = load_mmlu_pro(Path(args.mmlu_dir) / "validation.jsonl")
        mmlu_q = mmlu_val if args.mmlu_split == "validation" else load_mmlu_pro(Path(args.mmlu_dir) / "test.jsonl")
        if args.stratified:
            mmlu_q = stratified(mmlu_q, args.stratified)
        elif args.limit:
            mmlu_q = mmlu_q[: args.limit]
    return problems, mmlu_q, mmlu_val


def _check_args(args) -> str | None:
    for name in ("k", "limit", "stratified", "n_shots", "workers"):
        if getattr(args, name) < 0:
            return f"--{name} must be >= 0"
    if args.max_new_tokens <= 0 or args.max_model_len <= args.max_new_tokens:
        return "--max_new_tokens must be > 0 and below --max_model_len"
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return "--device cuda: torch sees no CUDA device"
    if args.no_greedy and args.k == 0:
        return "nothing to do: --no_greedy with --k 0"
    if not 0 < args.top_p <= 1 or args.temperature <= 0:
        return "--top_p must be in (0, 1] and --temperature > 0 (greedy is the separate pass@1 run)"
    out = Path(args.output_dir)
    if out.exists() and not out.is_dir():
        return f"--output_dir {out} exists and is not a directory"
    other = _results_of_another_model(out, args.model)
    if other:
        return (
            f"--output_dir {out} holds the results of model {other}, not {args.model}: give each model its own folder"
        )
    base = out.resolve()
    while not base.exists():  # the folder is made at the end: check now that it can be
        base = base.parent
    if not base.is_dir() or not os.access(base, os.W_OK):
        return f"--output_dir {out}: cannot write under {base}"
    return None


def _results_of_another_model(out: Path, model: str) -> str | None:
    """The model whose results are in ``out`` already, when it is not ``model`` (two models whose
    paths end alike, runs/*/model, must not share a folder)."""
    try:
        earlier = json.loads((out / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    theirs = str(earlier.get("model", "")) if isinstance(earlier, dict) else ""
    same = theirs == model or (os.path.exists(model) and os.path.exists(theirs) and os.path.samefile(model, theirs))
    return None if same or not theirs else theirs


def _route_engine_log(args) -> dict:
    """vLLM's own lines (warnings that read like errors) to OUTPUT_DIR/engine.log, as ``serl train``
    sends them to its run directory (serl.engines.engine_log). Returns the environment before, for
    the caller to restore: a notebook's next call must not log into this call's folder."""
    from serl.engines.engine_log import ENGINE_LOG, route_to
    from serl.engines.vllm_generator import vllm_available

    before = dict(os.environ)
    if args.show_engine_warnings or args.generator == "hf" or not vllm_available():
        return before
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    route_to(out / ENGINE_LOG)
    if not args.quiet:
        print(
            f"[eval] vLLM's own log lines go to {out / ENGINE_LOG} (--show_engine_warnings prints them here)",
            file=sys.stderr,
        )
    return before


def _fmt(x) -> str:
    return "-" if x is None else f"{100 * x:5.1f}"


def format_table(results: dict, k: int) -> str:
    # MMLU-Pro adds strict accuracy and the share decided by the lone-letter fallback
    cols = [
        c
        for c in (
            "pass@1",
            f"maj@{k}",
            f"pass@{k}",
            f"mean@{k}",
            "strict_pass@1",
            "fallback@1",
            f"strict_mean@{k}",
            f"fallback@{k}",
        )
        if any(c in e for e in results["benchmarks"].values())
    ]
    width = {c: max(9, len(c) + 2) for c in cols}
    lines = [f"{'benchmark':<22}{'n':>6}" + "".join(f"{c:>{width[c]}}" for c in cols)]
    rows = []
    for name, entry in results["benchmarks"].items():
        rows.append((name, entry))
        if name == MMLU:
            rows += [(f"  {g}", e) for g, e in entry["by_group"].items()]
    for name, entry in rows:
        lines.append(f"{name:<22}{entry['n']:>6}" + "".join(f"{_fmt(entry.get(c)):>{width[c]}}" for c in cols))
    return "\n".join(lines)


def run(args, generator=None, tokenizer=None) -> dict:
    """Evaluate and write outputs; ``generator``/``tokenizer`` may be passed in (tests, trainer)."""
    from serl.eval.math_bench import evaluate_math
    from serl.eval.mmlu_pro import evaluate_mmlu_pro
    from serl.eval.resume import Resumable
    from serl.rewards import EquivalenceChecker

    problems, mmlu_q, mmlu_val = _load_inputs(args)
    started = time.time()
    kind = "given" if generator is not None else "auto"
    model_path = args.model
    if generator is None:
        from serl.models.resolve import load_tokenizer, resolve_model

        model_path = resolve_model(args.model)
        tokenizer = load_tokenizer(model_path)
    if problems:  # every prompt fits, checked with the tokenizer alone, before the model loads
        from serl.data.lengths import check_eval_prompts
        from serl.eval.math_bench import build_prompt_ids

        check_eval_prompts(
            problems,
            tokenizer,
            args.max_model_len - args.max_new_tokens,
            lambda q: build_prompt_ids(q, tokenizer, args.prompt_style),
            "--max_model_len - --max_new_tokens",
            DataError,
        )
    restore_env = _route_engine_log(args) if kind != "given" else dict(os.environ)
    if kind != "given":
        kind, generator = make_generator(args.generator, model_path, tokenizer, args)
    log = None if args.quiet else sys.stderr
    generator = Resumable(generator, args.output_dir, str(model_path), log)  # finished chunks survive a stop
    common = dict(
        k=args.k,
        greedy=not args.no_greedy,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        prompt_style=args.prompt_style,
        seed=args.seed,
        chunk=args.chunk,
        log=log,
    )
    parts, wall = [], {}
    try:
        with EquivalenceChecker(workers=max(1, args.workers)) as checker:
            if problems:
                t = time.time()
                parts.append(
                    evaluate_math(generator, tokenizer, problems, checker=checker, fallback=args.fallback, **common)
                )
                wall["math"] = round(time.time() - t, 1)
            if mmlu_q:
                t = time.time()
                parts.append(
                    evaluate_mmlu_pro(
                        generator,
                        tokenizer,
                        mmlu_q,
                        mmlu_val,
                        checker=checker,
                        n_shots=args.n_shots,
                        max_prompt_tokens=args.max_model_len - args.max_new_tokens,
                        **common,
                    )
                )
                wall[MMLU] = round(time.time() - t, 1)
    finally:
        if kind != "given":
            generator.close()
        for name in ("SERL_ENGINE_LOG", "VLLM_LOGGING_CONFIG_PATH"):  # the routing was this call's only
            if restore_env.get(name) is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = restore_env[name]
    results = {
        "model": args.model,
        "model_path": str(model_path),
        "generator": kind,
        "dtype": getattr(generator, "dtype", None),
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "machine": platform.node(),
        "settings": {
            key: getattr(args, key)
            for key in (
                "benchmarks",
                "limit",
                "stratified",
                "mmlu_split",
                "n_shots",
                "k",
                "temperature",
                "top_p",
                "max_new_tokens",
                "max_model_len",
                "prompt_style",
                "fallback",
                "seed",
            )
        }
        | {"greedy": not args.no_greedy},
        "benchmarks": {},
        "metrics": {},
        "wall_seconds": wall | {"total": round(time.time() - started, 1)},
    }
    records = []
    for part in parts:
        results["benchmarks"] |= part["benchmarks"]
        results["metrics"] |= part["metrics"]
        records += part["records"]
    out = Path(args.output_dir)
    write_atomic(out / "generations.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    write_atomic(out / "results.json", json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    table = (
        f"model: {args.model}"
        + (f" ({model_path})" if str(model_path) != args.model else "")
        + "\n"
        + format_table(results, args.k)
    )  # a table printed or kept names what it measured
    write_atomic(out / "table.txt", table + "\n")
    generator.finished()
    print(table)
    return results


def cli_main(argv: list[str] | None = None) -> int:
    from serl.engines.stop import stop_at_once, stop_name
    from serl.engines.vllm_quirks import EngineDied

    try:
        with stop_at_once():  # SIGTERM as Ctrl-C: one line, exit 130, finished chunks kept
            return _main(argv)
    except KeyboardInterrupt as e:
        out = _output_dir(argv)
        kept = f"; finished chunks are kept in {out}: the same command continues from them" if out else ""
        print(f"serl eval: stopped by {stop_name(e)}{kept}", file=sys.stderr)
        return 130
    except EngineDied as e:  # one clear message, as `serl train` gives (SERL_DEBUG=1: the traceback)
        if os.environ.get("SERL_DEBUG"):
            raise
        print(f"serl eval: error: {e}\n(SERL_DEBUG=1 prints the traceback)", file=sys.stderr)
        return 1


def _output_dir(argv: list[str] | None) -> str | None:
    try:
        return build_parser().parse_known_args(argv)[0].output_dir
    except SystemExit:
        return None


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    problem = _check_args(args)
    if problem:
        return _fail(problem)
    if args.games:
        from serl.config.registry import recipe_module

        code = recipe_module("spiral", "evaluate").cli_run(args)
        if code or not args.benchmarks:
            return code
    elif not args.benchmarks:
        return _fail("nothing to evaluate: give --benchmarks (math, MMLU-Pro) and/or --games (SPIRAL games)")
    try:
        run(args)
    except (DataError, ModelError, GeneratorUnavailable) as e:
        return _fail(str(e))
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
