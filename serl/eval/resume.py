"""``serl eval`` keeps its generations as it goes and a rerun picks up where a stopped one ended.

``Resumable`` wraps the generator: every ``generate`` call (one chunk of prompts, see
``serl.eval.metrics.generate_in_chunks``) appends its completions to ``OUT/partial_generations.jsonl``
before returning, and a later run with the same ``--output_dir`` takes from that file every completion
whose prompt, count and sampling settings (and model) are the same, generating only the rest. The
file goes once ``results.json`` is written. A resumed sampled pass draws its missing samples anew,
so it is not bit-identical to an uninterrupted run with the same seed (greedy passes are).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from pathlib import Path

from serl.engines.base import Completion

PARTIAL = "partial_generations.jsonl"


def _key(model: str, prompt, n: int, sampling, seen: int) -> str:
    settings = {f.name: getattr(sampling, f.name) for f in dataclasses.fields(sampling)}
    text = json.dumps([model, prompt, n, settings, seen], sort_keys=True, default=list)
    return hashlib.sha1(text.encode()).hexdigest()


class Resumable:
    """A generator whose finished chunks survive a stop (see the module doc)."""

    def __init__(self, generator, out_dir: str | Path, model: str, log=sys.stderr):
        self.generator, self.model = generator, model
        self.path = Path(out_dir) / PARTIAL
        self.done: dict[str, list[dict]] = {}
        self.seen: dict[str, int] = {}  # a prompt asked again (a repeated question) is its own entry
        if self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                except ValueError:  # a line cut short by the stop: generated again
                    continue
                self.done[row["key"]] = row["completions"]
            if self.done and log is not None:
                print(
                    f"[eval] resuming: {len(self.done)} finished prompt(s) found in {self.path}", file=log, flush=True
                )
        self.reused = 0
        self.last_fresh: list[bool] = []

    def generate(self, prompts, n, sampling):
        keys = []
        for p in prompts:
            base = _key(self.model, p, n, sampling, 0)
            keys.append(_key(self.model, p, n, sampling, self.seen.get(base, 0)))
            self.seen[base] = self.seen.get(base, 0) + 1
        todo = [i for i, k in enumerate(keys) if k not in self.done]
        self.last_fresh = [k not in self.done for k in keys]  # which answers this call generated (speeds)
        fresh = self.generator.generate([prompts[i] for i in todo], n, sampling) if todo else []
        self.reused += len(prompts) - len(todo)
        if fresh:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                for i, group in zip(todo, fresh):
                    row = {"key": keys[i], "completions": [dataclasses.asdict(c) for c in group]}
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
                    self.done[keys[i]] = row["completions"]
                f.flush()
                os.fsync(f.fileno())
        return [[Completion(**c) for c in self.done[k]] for k in keys]

    def finished(self) -> None:
        """The results are written: the partial file is no longer needed."""
        self.path.unlink(missing_ok=True)

    def __getattr__(self, name):  # close(), and anything else the evaluators ask of the generator
        return getattr(self.generator, name)
