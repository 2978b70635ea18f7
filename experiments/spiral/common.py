"""Pieces shared by the stronger-model stages of the SPIRAL experiment (probe_legal.py, paired_eval.py):
one generator per model, and the recipe's way of turning a game prompt into model input.

The prompt is the recipe's (``render_prompt`` with the legal actions and the format example, as
``serl/recipes/spiral/recipe.py`` builds it), in the chat template through ``serl.models.chat.user_ids``
with the run's instruction appended, so a probe or an evaluation sees what training sees.
"""
from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # this checkout's serl


def game_prompt(show_legal_actions: bool = True, example: bool = True):
    from serl.recipes.spiral.games.prompts import render_prompt

    return partial(render_prompt, show_legal_actions=show_legal_actions, example=example)


def open_generator(model: str, kind: str = "auto", seed: int = 0, kv_cache_gib: float = 2.0,
                   max_model_len: int = 2048):
    """(tokenizer, generator) for ``model`` (a name serl.models.resolve knows, or a directory). The stages that
    use it run alone (no learner beside them), so vLLM gets serl's default 2 GiB KV cache."""
    from serl.engines.factory import make_generator
    from serl.models.resolve import load_tokenizer, resolve_model

    path = resolve_model(model)
    tok = load_tokenizer(path)
    return tok, make_generator(kind, path, tok, seed=seed, kv_cache_gib=kv_cache_gib, max_model_len=max_model_len)


def chat_completions(gen, tok, sampling, system_prompt: str = ""):
    """prompts -> one completion each (``.text``, ``.token_ids``, ``.finish_reason``)."""
    from serl.models.chat import user_ids

    def generate(prompts: list[str]) -> list:
        return [g[0] for g in gen.generate([user_ids(tok, p, system_prompt) for p in prompts], 1, sampling)]

    return generate


def close(gen) -> None:
    if hasattr(gen, "close"):
        gen.close()


def write_json(path: Path, obj) -> None:
    """Atomic: a stage's output exists only once it is complete (the resume keys on it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    tmp.replace(path)
