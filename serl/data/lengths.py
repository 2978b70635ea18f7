"""How long model input may be: one rule for every recipe, ``serl instruct`` and ``serl eval``.

A prompt may hold at most ``--prompt_max_len`` tokens, and never more than the model's
context minus the reply (``--generate_max_len``). The rule is checked on the input files
before any model work, and without tokenizing what is surely too long: a text of more
than ``max_chars`` characters (twice the longest token's characters times the limit)
cannot fit, so a 5 MB line costs a length check, not a tokenizer pass.

What happens to a prompt over the limit is what ``--prompt_max_len`` documents: it is
skipped, counted and named (file and line) in a warning; when nothing is left, the run is
refused with the first one's file and line. Evaluation problems are never skipped (a
benchmark with problems left out is another benchmark): one over the limit is refused.
"""

from __future__ import annotations

import functools
import json
import logging
import weakref
from pathlib import Path

from serl import ConfigError, DataError
from serl.models.chat import text_ids, user_ids

log = logging.getLogger(__name__)
CHAR_SLACK = 2  # a normaliser may merge characters; twice the bound stays sound
SHOWN = 3  # skipped rows named in the warning


def model_context(model_path: str) -> int | None:
    """The model's context in tokens from its config.json, or None when unknown."""
    try:
        cfg = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        if isinstance(cfg.get(key), int) and cfg[key] > 0:
            return cfg[key]
    return None


_CHARS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> max_token_chars


def max_token_chars(tok) -> int:
    """Most characters one token can stand for (a vocabulary entry's length bounds it; at
    least 64). Read once per tokenizer: a budget is made per question in MMLU-Pro."""
    try:
        return _CHARS[tok]
    except (KeyError, TypeError):
        pass
    try:
        n = max(64, max(len(t) for t in tok.get_vocab()))
    except (AttributeError, TypeError, ValueError):
        n = 64
    try:
        _CHARS[tok] = n
    except TypeError:  # not weakly referable: computed each time
        pass
    return n


class PromptBudget:
    """At most ``max_tokens`` tokens per prompt; ``measure`` says how many a text takes."""

    def __init__(self, tok, max_tokens: int, option: str = "--prompt_max_len"):
        self.tok, self.max_tokens, self.option = tok, max_tokens, option
        self.max_chars = CHAR_SLACK * max_token_chars(tok) * max_tokens

    def encode(self, text: str, build=None) -> list[int] | None:
        """``build(text)`` (default: ``text`` alone, as plain-text ids); None, without
        tokenizing, when ``text`` has more than ``max_chars`` characters: surely over."""
        if len(text) > self.max_chars:
            return None
        return build(text) if build is not None else text_ids(self.tok, text)

    def measure(self, text: str, build=None) -> int | None:
        """Tokens of ``encode(text, build)``; None when surely over."""
        ids = self.encode(text, build)
        return None if ids is None else len(ids)

    def over(self, n: int | None) -> bool:
        return n is None or n > self.max_tokens

    def describe(self, n: int | None, text: str) -> str:
        size = f"{n} tokens" if n is not None else f"{len(text)} characters, surely over {self.max_tokens} tokens"
        return f"{size}; {self.option} is {self.max_tokens}"


@functools.lru_cache(maxsize=4)
def run_tokenizer(model_path: str):
    """The run's tokenizer, loaded once: the length checks of prepare() and the runner share it."""
    from serl.models.resolve import load_tokenizer

    return load_tokenizer(model_path)


def prompt_limit(cfg, model_path: str) -> int:
    """``--prompt_max_len``, cut to the model's context minus ``--generate_max_len``."""
    return context_limit(cfg.prompt_max_len, cfg.generate_max_len, model_path)


def context_limit(max_prompt: int, max_new: int, model_path: str, new_option: str = "generate_max_len") -> int:
    """``max_prompt``, cut to what the model's context leaves after ``max_new`` tokens."""
    if max_prompt < 1:
        raise ConfigError(f"prompt_max_len: must be >= 1, got {max_prompt}")
    ctx = model_context(model_path)
    if ctx is None:
        return max_prompt
    if ctx - max_new < 1:
        raise ConfigError(f"{new_option}: {max_new} leaves no room for a prompt in the model's context of {ctx} tokens")
    return min(max_prompt, ctx - max_new)


def budget_for(cfg) -> PromptBudget:
    """The run's prompt budget (tokenizer only: no model is loaded). Refuses a
    ``--system_prompt`` that alone leaves no room for a problem."""
    from serl.models.resolve import resolve_model

    path = resolve_model(cfg.model)
    limit = prompt_limit(cfg, path)
    budget = PromptBudget(run_tokenizer(path), limit)
    instruction = cfg.system_prompt or ""
    n = budget.measure(instruction, lambda t: user_ids(budget.tok, "", t))
    if budget.over(n):
        raise ConfigError(
            f"system_prompt: a prompt with it and an empty problem takes {budget.describe(n, instruction)}"
        )
    return budget


class Fitted(list):
    """The rows that fit, with ``skipped``: the (where, size) of those that did not."""

    skipped: list


def fit_problems(cfg, problems, budget: PromptBudget | None = None, with_answers: bool = False) -> Fitted:
    """The problems whose rollout prompt (chat template and ``--system_prompt`` included)
    fits the run's budget; with ``with_answers`` (SPIN), prompt and human answer must also
    fit the run's context, ``--prompt_max_len`` + ``--generate_max_len``."""
    budget = budget or budget_for(cfg)
    tok = budget.tok
    room = cfg.generate_max_len if with_answers else None
    return fit_rows(
        problems,
        budget,
        lambda t: user_ids(tok, t, cfg.system_prompt or ""),
        cfg.prompt_data,
        answer_room=room,
        answer_key=cfg.output_key,
    )


def fit_rows(
    problems, budget: PromptBudget, build, source: str, answer_room: int | None = None, answer_key: str = ""
) -> Fitted:
    """The problems whose prompt ``build(text)`` fits ``budget``; with ``answer_room``, a
    ``solution`` must also fit in what the prompt leaves of ``budget`` + ``answer_room``.
    Skipped rows are named in a warning; a DataError (first one's file and line) when none
    is left."""
    kept, skipped = Fitted(), []
    for p in problems:
        n = budget.measure(p.text, build)
        if budget.over(n):
            skipped.append((p.where or source, f"prompt of {budget.describe(n, p.text)}"))
            continue
        assert n is not None  # over() is true for an unmeasured prompt
        if answer_room is not None and p.solution is not None:
            answer = PromptBudget(
                budget.tok,
                budget.max_tokens + answer_room - n,
                f"the room left ({budget.option} + --generate_max_len - prompt)",
            )
            m = answer.measure(p.solution)
            if answer.over(m):
                skipped.append((p.where or source, f"'{answer_key}' of {answer.describe(m, p.solution)}"))
                continue
        kept.append(p)
    kept.skipped = skipped
    report_skipped(skipped, len(problems), "problem", source)
    if not kept:
        where, why = skipped[0]
        raise DataError(
            f"{where}: {why} (chat template included); no problem of {source} fits, so there is nothing to work on"
        )
    return kept


def report_skipped(skipped: list, total: int, what: str, source: str) -> None:
    if skipped:
        shown = "; ".join(f"{w}: {why}" for w, why in skipped[:SHOWN])
        more = f" (and {len(skipped) - SHOWN} more)" if len(skipped) > SHOWN else ""
        log.warning("%s: %d of %d %ss skipped as too long: %s%s", source, len(skipped), total, what, shown, more)


def check_eval_prompts(problems, tok, max_tokens: int, build, option: str, error=DataError) -> None:
    """Refuse (``error``, file and line) an evaluation problem whose prompt
    ``build(question)`` is over ``max_tokens``: a benchmark is never cut silently."""
    budget = PromptBudget(tok, max_tokens, option)
    for p in problems:
        n = budget.measure(p.question, build)
        if budget.over(n):
            where = getattr(p, "where", "") or f"{p.benchmark} problem {p.idx + 1}"
            raise error(
                f"{where}: prompt of {budget.describe(n, p.question)}; shorten or remove "
                f"the problem, or raise the limit"
            )
