"""The collapse guard's probe and anchor file (``serl.run.guard``): which training prompts it
probes, and the untrained model's vote on them, written once and reusable by other runs
that share the probe, model and answer limit (``--guard_anchor``)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

from serl import ConfigError

ANCHOR_FILE = "guard_anchor.jsonl"
# What makes two anchors comparable: a run refuses another run's anchor unless these match.
MUST_MATCH = ("model", "generate_max_len", "system_prompt", "answer_fallback")


def select_probe(prompts: list[tuple[str, str | None]], n: int, seed: int) -> list[tuple[int, str, str | None]]:
    """``n`` of the training prompts (text, label), drawn with ``seed``: (index, text, label)."""
    idx = sorted(random.Random(seed).sample(range(len(prompts)), min(n, len(prompts))))
    return [(i, prompts[i][0], prompts[i][1]) for i in idx]


def anchor_header(cfg, model_path: str) -> dict:
    return {
        "kind": "serl-guard-anchor",
        "model": str(model_path),
        "generate_max_len": cfg.generate_max_len,
        "system_prompt": cfg.system_prompt,
        "temperature": cfg.temperature,
        "top_p": cfg.top_p,
        "k": cfg.guard_k,
        "seed": cfg.seed,
        "answer_fallback": cfg.answer_fallback,
    }


def read_anchor(path: Path, cfg, model_path: str, probe) -> dict[int, str | None]:
    """An anchor file's answers by probe index, refused (naming file, line and field) unless it
    was made for this probe, model and answer limit."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        rows = [json.loads(x) for x in lines if x.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"guard_anchor: cannot read {path}: {e}") from None
    if not rows or rows[0].get("kind") != "serl-guard-anchor":
        raise ConfigError(f"guard_anchor: {path}, line 1: not a serl guard anchor file")
    want = anchor_header(cfg, model_path)
    for key in MUST_MATCH:
        if rows[0].get(key) != want[key]:
            raise ConfigError(
                f"guard_anchor: {path}, line 1: '{key}' is {rows[0].get(key)!r}, this run's is "
                f"{want[key]!r}; an anchor is only comparable under the same {key}"
            )
    got = [(r.get("i"), r.get("prompt")) for r in rows[1:]]
    mine = [(i, text) for i, text, _ in probe]
    if got != mine:
        bad = next((k for k, (a, b) in enumerate(zip(got, mine)) if a != b), min(len(got), len(mine)))
        raise ConfigError(
            f"guard_anchor: {path}, line {bad + 2}: its probe ({len(got)} prompts) is not this "
            f"run's ({len(mine)} prompts drawn with --seed {cfg.seed}, --guard_probe "
            f"{cfg.guard_probe} from {cfg.guard_probe_data or cfg.prompt_data}); use the same "
            f"prompts, seed and probe size"
        )
    return {r["i"]: r.get("anchor") for r in rows[1:]}


def write_anchor(path: Path, header: dict, probe, answers: dict[int, str | None], shares: dict[int, float]) -> None:
    tmp = Path(path).with_name(Path(path).name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(header) + "\n")
        for i, text, _ in probe:
            f.write(
                json.dumps({"i": i, "prompt": text, "anchor": answers.get(i), "vote_share": shares.get(i, 0.0)}) + "\n"
            )
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
