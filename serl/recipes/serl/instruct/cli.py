"""``serl instruct``: write N new problems from a seed file, with every filter decision.

Each output line is one parsed candidate: its text, whether it passed, the filter
that rejected it and why, and the seed ids it was generated from. The file is
written atomically (temporary file + rename): a failed run leaves no partial output.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from serl.data.lengths import PromptBudget, context_limit, fit_rows
from serl.recipes.serl.instruct.config import InstructConfig
from serl.recipes.serl.instruct.template import TemplateError, build_prompt_ids, load_template

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    d = InstructConfig()
    ap = argparse.ArgumentParser(
        prog="serl instruct", description="Generate new problems from seed problems by few-shot prompting."
    )
    ap.add_argument("--seeds", required=True, help="seed file (.jsonl/.json/.parquet)")
    ap.add_argument("--out", required=True, help="output JSONL: one line per candidate with its filter decision")
    ap.add_argument("-n", "--num", type=int, default=32, help="how many problems must pass the text filters")
    ap.add_argument(
        "--model",
        default="smollm2",
        help="model: 'smollm2', 'qwen2.5-coder-0.5b' (opt-in), a .gguf file, an HF directory or hub id",
    )
    ap.add_argument("--input_key", default="problem", help="seed field holding the problem text")
    ap.add_argument("--label_key", default="answer", help="seed field holding the answer (optional)")
    ap.add_argument(
        "--run_dir", default=None, help="keep the prompt pool (pool.jsonl) here; default: a temporary directory"
    )
    ap.add_argument("--seed", type=int, default=0, help="random seed for example choice and sampling")
    ap.add_argument("--n_shots", type=int, default=d.n_shots, help="examples per few-shot prompt")
    ap.add_argument("--temperature", type=float, default=d.temperature, help="sampling temperature")
    ap.add_argument("--top_p", type=float, default=d.top_p, help="nucleus sampling top-p")
    ap.add_argument(
        "--presence_penalty",
        type=float,
        default=d.presence_penalty,
        help="presence penalty (engines without one ignore it)",
    )
    ap.add_argument("--max_new_tokens", type=int, default=d.max_new_tokens, help="tokens per completion")
    ap.add_argument(
        "--prompts_per_call", type=int, default=d.prompts_per_call, help="few-shot prompts per generate call"
    )
    ap.add_argument(
        "--max_attempts", type=int, default=d.max_attempts, help="most generate calls before stopping short"
    )
    ap.add_argument("--min_words", type=int, default=d.min_words, help="word-count lower bound")
    ap.add_argument("--max_words", type=int, default=d.max_words, help="word-count upper bound")
    ap.add_argument(
        "--rouge_threshold",
        type=float,
        default=d.rouge_threshold,
        help="reject candidates whose ROUGE-L F1 with a known problem exceeds this",
    )
    ap.add_argument(
        "--prompt_max_len",
        type=int,
        default=1024,
        help="most tokens of a few-shot prompt (and at most the model's context minus "
        "--max_new_tokens): its longest examples are left out to fit; a seed too long "
        "even alone is skipped, with a warning naming its line",
    )
    ap.add_argument("--template", default=d.template, help="template name in prompts/ or a path")
    fmt = ap.add_mutually_exclusive_group()
    fmt.add_argument(
        "--chat_format",
        dest="chat_format",
        action="store_true",
        default=d.chat_format,
        help="put the list in the chat template (assistant pre-filled with the next number)",
    )
    fmt.add_argument(
        "--raw_format", dest="chat_format", action="store_false", help="raw text continuation of the numbered list"
    )
    ap.add_argument(
        "--dtype",
        choices=["auto", "float32", "bfloat16"],
        default="auto",
        help="model dtype for generation: auto (bfloat16 where the CPU computes it natively, "
        "AMX or AVX-512-BF16, ~3x faster there; else float32)",
    )
    ap.add_argument("--only_passed", action="store_true", help="write only candidates that passed")
    return ap


def _fail(msg: str) -> int:
    print(f"serl instruct: error: {msg}", file=sys.stderr)
    return 2


def write_jsonl_atomic(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def cli_main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from serl import DataError, ModelError
    from serl.data.seeds import read_seeds
    from serl.models.resolve import load_tokenizer, resolve_model

    if args.num < 1:
        return _fail(f"--num must be >= 1, got {args.num}")
    try:
        cfg = InstructConfig(
            n_shots=args.n_shots,
            temperature=args.temperature,
            top_p=args.top_p,
            presence_penalty=args.presence_penalty,
            max_new_tokens=args.max_new_tokens,
            prompts_per_call=args.prompts_per_call,
            max_attempts=args.max_attempts,
            min_words=args.min_words,
            max_words=args.max_words,
            rouge_threshold=args.rouge_threshold,
            template=args.template,
            chat_format=args.chat_format,
        )
        template = load_template(cfg.template)
        seeds = read_seeds(args.seeds, args.input_key, args.label_key)
        model_path = resolve_model(args.model)
        tok = load_tokenizer(model_path)
        cfg.max_prompt_tokens = context_limit(args.prompt_max_len, args.max_new_tokens, model_path, "--max_new_tokens")
        # the length rule of training (serl.data.lengths), on the seed as a one-example prompt
        budget = PromptBudget(tok, cfg.max_prompt_tokens, "--prompt_max_len")
        seeds = fit_rows(seeds, budget, lambda t: build_prompt_ids(template, [t], tok, cfg.chat_format), args.seeds)
    except (ValueError, TemplateError, DataError, ModelError) as e:
        return _fail(str(e))
    out = Path(args.out)
    if out.is_dir():
        return _fail(f"--out {out} is a directory")

    import torch

    from serl.engines.hf_generator import HFGenerator
    from serl.recipes.serl.instruct.generate import SelfInstruct
    from serl.recipes.serl.instruct.pool import PoolError, PromptPool

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="serl-instruct-") as tmp:
        run_dir = Path(args.run_dir) if args.run_dir else Path(tmp)
        try:
            pool = PromptPool.create(run_dir, seeds)
        except PoolError as e:
            return _fail(str(e))
        from serl.engines.precision import generator_dtype, hardware

        on = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = generator_dtype(args.dtype, hardware(on))
        logging.getLogger("serl").info(
            "precision: %s; generator in %s (--dtype %s)", hardware(on).summary(), dtype, args.dtype
        )
        gen = HFGenerator(model_path, tok, seed=args.seed, batch_size=cfg.prompts_per_call, dtype=getattr(torch, dtype))
        si = SelfInstruct(gen, tok, pool, cfg)
        added, metrics = si.propose(args.num, step=1, rng=random.Random(args.seed))
        pool.flush(step=1)
    rows = []
    for c in si.last_candidates:
        if args.only_passed and c.filter is not None:
            continue
        row = asdict(c)
        row["passed"] = c.filter is None
        rows.append(row)
    write_jsonl_atomic(out, rows)
    log.info(
        "wrote %d candidates (%d passed) to %s; %s",
        len(rows),
        len(added),
        out,
        json.dumps({k: round(v, 3) for k, v in metrics.items()}),
    )
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
