"""Scoring short answers to questions about text, with no model in the loop.

Rules used by document-QA self-play (SPELL: Yang et al., "SPELL: Self-Play Reinforcement
Learning for Evolving Long-Context Language Models", Tongyi-Zhiwen 2025; the rule is
cited from its public reward code, the code is ours):

* the answer follows the phrase "The answer is" (:func:`extract_final_answer`);
* its score is cover exact match (:func:`cover_em`): the normalised gold answer appears,
  as a run of whole tokens, in the normalised prediction; for math-looking gold answers
  an injected ``equivalent(pred, gold) -> bool`` (e.g.
  ``serl.rewards.EquivalenceChecker().equal``) is asked when the text rule fails;
* :func:`rule_score` is the strict score (phrase and cover-EM), :func:`lenient_score`
  the gold anywhere in the reply: side by side they tell format gains from content gains.

Where we differ from upstream, on purpose: cover-EM matches whole tokens, so gold "12"
does not match "120"; a dot or comma between two digits survives normalisation ("3.5"
stays "3.5", "1,200" becomes "1200").

Model text is untrusted: only its tail (``MAX_SCAN_CHARS``) is looked at.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Sequence

from serl.rewards.extract import last_boxed
from serl.rewards.normalize import is_empty

MAX_SCAN_CHARS = 4000  # model text looked at (its tail); bounds the work per response

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_DIGIT_SEP = re.compile(r"(?<=\d)([.,])(?=\d)")
_PUNCT = set(string.punctuation)
_ANSWER_IS = re.compile(r"answer\s+is\b\s*:?", re.IGNORECASE)
_MATHY = re.compile(
    r"^\s*\$?\s*-?(?:\d[\d,]*(?:\.\d+)?%?|\d+\s*/\s*\d+)\s*\$?\s*$"
    r"|\\(?:frac|dfrac|sqrt|boxed|pi|cdot|times)|\^"
)
_PLACEHOLDER = re.compile(r"insert answer here|<answer>", re.IGNORECASE)


def strip_thinking(text: str) -> str | None:
    """Text after the last ``</think>``; None when a ``<think>`` block never closes."""
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1]
    if "<think>" in text:
        return None
    return text


def normalize_answer(text: str) -> str:
    """SQuAD-style: lower case, drop punctuation and articles, collapse spaces.

    A ``.`` between digits is kept (a decimal point) and a ``,`` between digits is
    dropped (a thousands separator) before the punctuation goes.
    """
    s = _DIGIT_SEP.sub(lambda m: "\0" if m.group(1) == "." else "", text.lower())
    s = "".join(ch for ch in s if ch not in _PUNCT).replace("\0", ".")
    return " ".join(_ARTICLES.sub(" ", s).split())


def looks_like_math(answer: str) -> bool:
    """A plain number, a fraction or percentage, or LaTeX: worth an equivalence check."""
    return bool(_MATHY.search(answer))


def _contains_run(tokens: list[str], run: list[str]) -> bool:
    n = len(run)
    return any(tokens[i : i + n] == run for i in range(len(tokens) - n + 1))


def cover_em(prediction: str, gold: str, equivalent: Callable[[str, str], bool] | None = None) -> float:
    """1.0 when the normalised gold occurs as whole tokens in the normalised prediction.

    When that fails, the gold looks like math and ``equivalent`` is given, the answer
    is ``float(equivalent(prediction, gold))``. Empty gold or prediction scores 0.
    """
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:
        return 0.0
    if _contains_run(pred, ref):
        return 1.0
    if equivalent is not None and looks_like_math(gold):
        return 1.0 if equivalent(prediction.strip(), gold.strip()) else 0.0
    return 0.0


def extract_final_answer(response: str, max_chars: int = MAX_SCAN_CHARS) -> str | None:
    """The text after the last "answer is" on its line, cleaned; None when absent.

    Looks only at the last ``max_chars`` characters after any thinking block. A
    ``\\boxed{...}`` in the answer is unwrapped. An echoed placeholder ("insert answer
    here") or an empty answer (also one with nothing but presentation in it,
    :func:`serl.rewards.normalize.is_empty`) is no answer.
    """
    text = strip_thinking(response)
    if text is None:
        return None
    text = text[-max_chars:]
    hits = list(_ANSWER_IS.finditer(text))
    if not hits:
        return None
    ans = text[hits[-1].end() :].strip().split("\n", 1)[0]
    boxed = last_boxed(ans) if "\\boxed" in ans or "\\fbox" in ans else None
    if boxed is not None:
        ans = boxed
    ans = ans.lstrip("*_`\"' ").rstrip("*_`\"' .")  # markup and the closing full stop
    if not ans or is_empty(ans) or _PLACEHOLDER.search(ans):
        return None  # an empty form (``\\boxed{\\text{}}``) is no answer either: no judge is asked
    return ans


def rule_score(response: str, gold: str, equivalent: Callable[[str, str], bool] | None = None) -> float:
    """Strict score: the answer phrase is there and its answer covers the gold."""
    ans = extract_final_answer(response)
    return 0.0 if ans is None else cover_em(ans, gold, equivalent)


def lenient_score(response: str, gold: str, max_chars: int = MAX_SCAN_CHARS) -> float:
    """The gold anywhere in the response (its tail), answer phrase or not."""
    text = strip_thinking(response)
    return 0.0 if text is None else cover_em(text[-max_chars:], gold)


def cover_em_many(
    predictions: Sequence[str | None],
    golds: Sequence[str],
    equal_many: Callable[[list[tuple[str, str]]], list[bool]] | None = None,
) -> list[float]:
    """:func:`cover_em` for many (prediction, gold) pairs; a None prediction scores 0.

    The pairs the text rule fails on and whose gold looks like math go to ``equal_many``
    (e.g. ``serl.rewards.EquivalenceChecker().equal_many``, which takes (gold, answer)
    pairs) in a single call, so a batch pays one round trip to the checker pool.
    """
    if len(predictions) != len(golds):
        raise ValueError(f"{len(predictions)} predictions for {len(golds)} golds")
    scores = [0.0 if p is None else cover_em(p, g) for p, g in zip(predictions, golds)]
    ask = [
        i
        for i, (p, g, s) in enumerate(zip(predictions, golds, scores))
        if p is not None and s == 0.0 and p.strip() and looks_like_math(g)
    ]
    if equal_many is not None and ask:
        for i, same in zip(ask, equal_many([(golds[i].strip(), str(predictions[i]).strip()) for i in ask])):
            scores[i] = 1.0 if same else 0.0
    return scores
