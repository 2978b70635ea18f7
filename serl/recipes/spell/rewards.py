"""SPELL's reward rules as pure functions.

The rules follow the public SPELL implementation (Yang et al., "SPELL: Self-Play
Reinforcement Learning for Evolving Long-Context Language Models", Tongyi-Zhiwen
2025; numbers cited from its trainer and ``core_algos``); the code is ours.

Responder
    The answer follows the phrase "The answer is" (:func:`extract_final_answer`).
    Its rule score is cover exact match (:func:`cover_em`): the normalised gold
    answer appears, as a run of whole tokens, in the normalised prediction. For
    math-looking gold answers an injected ``equivalent(pred, gold) -> bool`` (e.g.
    ``serl.rewards.EquivalenceChecker().equal``) is asked when the text rule fails.
Verifier
    Each judgment ends with ``[[YES]]`` or ``[[NO]]`` (:func:`parse_judgment`: 1, 0,
    or -1 when unparseable). The k judgments of one answer give a majority
    (:func:`verifier_majority`). The responder's reward is max(rule, majority) when
    the majority is valid, else the rule score (:func:`responder_reward`). Each
    judgment earns 1 if it agrees with the majority, 0 if not, -1 for bad format
    (:func:`verifier_rewards`); the verifier is trained only where the majority's
    share of the valid judgments lies in [0.51, 0.99] and the majority equals the
    rule score (:func:`verifier_train_mask`).
Questioner
    -1 for bad format, -0.5 for ``bad_ground`` (the responder, without documents,
    scores at or above 0.1: :func:`is_bad_ground`), 0 when the responder's mean
    score is 0 or 1, else exp(-(r-0.5)^2 / (2 (1/6)^2)) (:func:`questioner_reward`).

Where we differ from upstream, on purpose: a tie between the top vote counts gives
no majority (upstream keeps whichever value came first); cover-EM matches whole
tokens, so gold "12" does not match "120"; a dot or comma between two digits
survives normalisation ("3.5" stays "3.5", "1,200" becomes "1200").
"""
from __future__ import annotations

import math
import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

from serl.rewards.extract import last_boxed

GROUNDING_THRESHOLD = 0.1
VERIFIER_SHARE_BOUNDS = (0.51, 0.99)
QUESTIONER_SIGMA = 1 / 6
QUESTIONER_STATUSES = ("ok", "bad_format", "bad_ground")
MAX_SCAN_CHARS = 4000  # model text looked at (its tail); bounds the work per response

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_DIGIT_SEP = re.compile(r"(?<=\d)([.,])(?=\d)")
_PUNCT = set(string.punctuation)
_ANSWER_IS = re.compile(r"answer\s+is\b\s*:?", re.IGNORECASE)
_JUDGE = re.compile(r"\[\[\s*(yes|no)\s*\]\]", re.IGNORECASE)
_MATHY = re.compile(r"^\s*\$?\s*-?(?:\d[\d,]*(?:\.\d+)?%?|\d+\s*/\s*\d+)\s*\$?\s*$"
                    r"|\\(?:frac|dfrac|sqrt|boxed|pi|cdot|times)|\^")
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
    return any(tokens[i:i + n] == run for i in range(len(tokens) - n + 1))


def cover_em(prediction: str, gold: str,
             equivalent: Callable[[str, str], bool] | None = None) -> float:
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
    here") or an empty answer is no answer.
    """
    text = strip_thinking(response)
    if text is None:
        return None
    text = text[-max_chars:]
    hits = list(_ANSWER_IS.finditer(text))
    if not hits:
        return None
    ans = text[hits[-1].end():].strip().split("\n", 1)[0]
    boxed = last_boxed(ans) if "\\boxed" in ans or "\\fbox" in ans else None
    if boxed is not None:
        ans = boxed
    ans = ans.lstrip("*_`\"' ").rstrip("*_`\"' .")  # markup and the closing full stop
    if not ans or _PLACEHOLDER.search(ans):
        return None
    return ans


def rule_score(response: str, gold: str,
               equivalent: Callable[[str, str], bool] | None = None) -> float:
    """Strict score: the answer phrase is there and its answer covers the gold."""
    ans = extract_final_answer(response)
    return 0.0 if ans is None else cover_em(ans, gold, equivalent)


def lenient_score(response: str, gold: str, max_chars: int = MAX_SCAN_CHARS) -> float:
    """The gold anywhere in the response (its tail), answer phrase or not."""
    text = strip_thinking(response)
    return 0.0 if text is None else cover_em(text[-max_chars:], gold)


def parse_judgment(text: str, max_chars: int = MAX_SCAN_CHARS) -> int:
    """1 for ``[[YES]]``, 0 for ``[[NO]]``, -1 when neither or both appear (or the
    thinking block never closes). Case and inner spaces are ignored."""
    body = strip_thinking(text)
    if body is None:
        return -1
    found = {m.group(1).lower() for m in _JUDGE.finditer(body[-max_chars:])}
    if found == {"yes"}:
        return 1
    if found == {"no"}:
        return 0
    return -1


@dataclass(frozen=True)
class Majority:
    """The verifier's verdict on one answer."""
    label: int    # 1 yes, 0 no, -1 no valid majority (bad format wins, a tie, or no judgments)
    share: float  # the label's share of the valid (0/1) judgments; 0.0 when label is -1
    n_valid: int  # judgments that parsed
    n: int        # all judgments

    @property
    def valid(self) -> bool:
        return self.label >= 0


def verifier_majority(judgments: Sequence[int]) -> Majority:
    """Most common of the k judgments (1, 0 or -1); a tie at the top is no majority."""
    bad = [j for j in judgments if j not in (1, 0, -1)]
    if bad:
        raise ValueError(f"judgments must be 1, 0 or -1, got {bad[0]!r}")
    n = len(judgments)
    n_valid = sum(1 for j in judgments if j != -1)
    top = Counter(judgments).most_common()
    if not top or (len(top) > 1 and top[0][1] == top[1][1]) or top[0][0] == -1:
        return Majority(-1, 0.0, n_valid, n)
    label, count = top[0]
    return Majority(label, count / n_valid, n_valid, n)


def responder_reward(rule: float, majority: Majority) -> float:
    """max(rule score, verifier majority) when the majority is valid, else the rule score."""
    return max(rule, float(majority.label)) if majority.valid else rule


def verifier_rewards(judgments: Sequence[int], majority: Majority) -> list[float]:
    """Per judgment: -1 bad format, 1 agrees with the majority, 0 otherwise (also when
    there is no valid majority; such groups are masked out of training anyway)."""
    return [-1.0 if j == -1 else (1.0 if majority.valid and j == majority.label else 0.0)
            for j in judgments]


def verifier_train_mask(majority: Majority, rule: float,
                        bounds: tuple[float, float] = VERIFIER_SHARE_BOUNDS) -> bool:
    """Train the verifier on this answer's judgments only if the majority is valid, its
    share lies in ``bounds`` (inclusive) and it agrees with the rule score."""
    lo, hi = bounds
    return majority.valid and lo <= majority.share <= hi and float(majority.label) == rule


def is_bad_ground(no_doc_score: float, threshold: float = GROUNDING_THRESHOLD) -> bool:
    """The question is answerable without the documents: the responder's (mean) score
    with the documents removed is at or above ``threshold``."""
    return no_doc_score >= threshold


def difficulty_reward(mean_score: float, sigma: float = QUESTIONER_SIGMA) -> float:
    """0 when every response is right or every one wrong, else a Gaussian bump at 0.5."""
    if not 0.0 <= mean_score <= 1.0:
        raise ValueError(f"mean responder score must lie in [0, 1], got {mean_score}")
    if mean_score in (0.0, 1.0):
        return 0.0
    return math.exp(-((mean_score - 0.5) ** 2) / (2 * sigma ** 2))


def questioner_reward(status: str, mean_score: float | None = None,
                      sigma: float = QUESTIONER_SIGMA) -> float:
    """-1 bad format, -0.5 bad_ground, else :func:`difficulty_reward` of the mean score."""
    if status == "bad_format":
        return -1.0
    if status == "bad_ground":
        return -0.5
    if status != "ok":
        raise ValueError(f"unknown questioner status {status!r}; expected one of {QUESTIONER_STATUSES}")
    if mean_score is None:
        raise ValueError("a questioner with status 'ok' needs the responder's mean score")
    return difficulty_reward(mean_score, sigma)


def cover_em_many(predictions: Sequence[str | None], golds: Sequence[str],
                  equal_many: Callable[[list[tuple[str, str]]], list[bool]] | None = None) -> list[float]:
    """:func:`cover_em` for many (prediction, gold) pairs; a None prediction scores 0.

    The pairs the text rule fails on and whose gold looks like math go to ``equal_many``
    (e.g. ``serl.rewards.EquivalenceChecker().equal_many``, which takes (gold, answer)
    pairs) in a single call, so a batch pays one round trip to the checker pool.
    """
    if len(predictions) != len(golds):
        raise ValueError(f"{len(predictions)} predictions for {len(golds)} golds")
    scores = [0.0 if p is None else cover_em(p, g) for p, g in zip(predictions, golds)]
    ask = [i for i, (p, g, s) in enumerate(zip(predictions, golds, scores))
           if p is not None and s == 0.0 and p.strip() and looks_like_math(g)]
    if equal_many is not None and ask:
        for i, same in zip(ask, equal_many([(golds[i].strip(), predictions[i].strip()) for i in ask])):
            scores[i] = 1.0 if same else 0.0
    return scores
