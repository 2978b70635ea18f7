"""Cheap text filters for generated problems, and the difficulty filter after rollout.

Each filter is a small object with ``name``, ``check(text) -> reason | None`` and its
own ``passed``/``rejected`` counters. ``TextFilters`` runs them in order (cheapest
first) on the whitespace-normalised text; the text's case is kept.
"""

from __future__ import annotations

import hashlib
import logging
import re
import string
from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar

from serl.data.novelty import RougeIndex

log = logging.getLogger(__name__)

# Things a text-only model cannot see or do; matched as whole words, case-insensitive.
DEFAULT_BANNED = (
    "image",
    "images",
    "graph",
    "graphs",
    "picture",
    "pictures",
    "photo",
    "photos",
    "file",
    "files",
    "map",
    "maps",
    "draw",
    "drawn",
    "drawing",
    "plot",
    "plots",
    "go to",
    "video",
    "audio",
    "diagram",
    "flowchart",
    "[asy]",
    "website",
)
DEFAULT_BANNED_STARTS = ("write a program",)


def normalize(text: str) -> str:
    """Collapse every run of whitespace to one space and strip the ends; keep case."""
    return " ".join(text.split())


def text_key(text: str) -> str:
    """Hash used for exact-duplicate detection: whitespace-normalised, case-folded."""
    return hashlib.sha1(normalize(text).casefold().encode("utf-8")).hexdigest()


@dataclass
class _Counted:
    name: ClassVar[str]  # each filter's own (its metrics' names)
    passed: int = 0
    rejected: int = 0
    reasons: Counter = field(default_factory=Counter)

    def _count(self, reason: str | None) -> str | None:
        if reason is None:
            self.passed += 1
        else:
            self.rejected += 1
            self.reasons[reason.split(":")[0]] += 1
        return reason

    def check(self, text: str) -> str | None:  # None: passes; else why not
        raise NotImplementedError


class LengthFilter(_Counted):
    name = "length"

    def __init__(self, min_words: int = 4, max_words: int = 150):
        super().__init__()
        self.min_words, self.max_words = min_words, max_words

    def check(self, text: str) -> str | None:
        n = len(text.split())
        if n < self.min_words:
            return self._count(f"too_short: {n} words < {self.min_words}")
        if n > self.max_words:
            return self._count(f"too_long: {n} words > {self.max_words}")
        return self._count(None)


class BannedWordsFilter(_Counted):
    name = "banned"

    def __init__(self, words=DEFAULT_BANNED):
        super().__init__()
        self.words = tuple(words)
        # Whole words only: "map" must not hit "mapping"; phrases match across one space.
        alts = "|".join(re.escape(w) for w in sorted(self.words, key=len, reverse=True))
        self._re = re.compile(rf"(?<![A-Za-z0-9])(?:{alts})(?![A-Za-z0-9])", re.IGNORECASE)

    def check(self, text: str) -> str | None:
        m = self._re.search(text) if self.words else None
        return self._count(f"banned_word: {m.group(0).lower()}" if m else None)


class StartFilter(_Counted):
    """Rejects items that start with a banned phrase, punctuation, or a non-ASCII char.

    ``allowed_punct`` lists punctuation that may open a problem: ``$`` by default,
    since math problems can open with inline LaTeX (4 of the 500 SeRL seeds do).
    """

    name = "start"

    def __init__(self, banned_starts=DEFAULT_BANNED_STARTS, allowed_punct: str = "$"):
        super().__init__()
        self.banned_starts = tuple(s.casefold() for s in banned_starts)
        self.allowed_punct = allowed_punct

    def check(self, text: str) -> str | None:
        if not text:
            return self._count("empty")
        first = text[0]
        if not first.isascii():
            return self._count(f"non_ascii_start: {first!r}")
        if first in string.punctuation and first not in self.allowed_punct:
            return self._count(f"punct_start: {first!r}")
        low = text.casefold()
        for s in self.banned_starts:
            if low.startswith(s):
                return self._count(f"banned_start: {s}")
        return self._count(None)


class DuplicateFilter(_Counted):
    """Exact duplicates of a known text after whitespace normalisation and case-folding."""

    name = "duplicate"

    def __init__(self):
        super().__init__()
        self.keys: set[str] = set()

    def add(self, text: str) -> None:
        self.keys.add(text_key(text))

    def check(self, text: str) -> str | None:
        return self._count("duplicate" if text_key(text) in self.keys else None)


class NoveltyFilter(_Counted):
    """ROUGE-L F1 against every known text must not exceed ``threshold``."""

    name = "rouge"

    def __init__(self, threshold: float = 0.7):
        super().__init__()
        self.index = RougeIndex(threshold)

    def add(self, text: str) -> None:
        self.index.add(text)

    def check(self, text: str) -> str | None:
        bad, score, idx = self.index.too_similar(text)
        return self._count(f"too_similar: rougeL={score:.3f} vs known #{idx}" if bad else None)


class PromptLengthFilter(_Counted):
    """Rejects a problem whose rollout prompt would exceed ``max_tokens`` (``--prompt_max_len``).

    ``count_tokens(text)`` gives the length of the prompt the policy will see for ``text``
    (chat template and instruction included)."""

    name = "prompt_len"

    def __init__(self, count_tokens, max_tokens: int):
        super().__init__()
        self.count_tokens, self.max_tokens = count_tokens, max_tokens

    def check(self, text: str) -> str | None:
        n = self.count_tokens(text)
        return self._count(f"too_long: {n} prompt tokens > {self.max_tokens}" if n > self.max_tokens else None)


class TextFilters:
    """All text filters, in order, plus the set of known texts they compare against.

    ``sync(known)`` takes the pool's append-only list of known texts and indexes the
    ones it has not seen yet; ``add_known`` indexes one more text (a candidate that
    just passed, so the next candidates of the same batch are compared with it too).
    """

    def __init__(
        self,
        min_words: int = 4,
        max_words: int = 150,
        rouge_threshold: float = 0.7,
        banned_words=DEFAULT_BANNED,
        banned_starts=DEFAULT_BANNED_STARTS,
        allowed_start_punct: str = "$",
    ):
        self.length = LengthFilter(min_words, max_words)
        self.banned = BannedWordsFilter(banned_words)
        self.start = StartFilter(banned_starts, allowed_start_punct)
        self.duplicate = DuplicateFilter()
        self.novelty = NoveltyFilter(rouge_threshold)
        self.filters = [self.length, self.banned, self.start, self.duplicate, self.novelty]
        self._n_known = 0

    @classmethod
    def from_config(cls, cfg) -> TextFilters:
        return cls(
            cfg.min_words,
            cfg.max_words,
            cfg.rouge_threshold,
            cfg.banned_words,
            cfg.banned_starts,
            cfg.allowed_start_punct,
        )

    def add_filter(self, f) -> None:
        """One more filter, run before the (costlier) duplicate and novelty checks."""
        self.filters.insert(self.filters.index(self.duplicate), f)

    def add_known(self, text: str) -> None:
        self.duplicate.add(text)
        self.novelty.add(text)
        self._n_known += 1

    def sync(self, known: list[str]) -> None:
        for text in known[self._n_known :]:
            self.add_known(text)

    def check(self, text: str) -> tuple[str, str | None, str | None]:
        """Return (normalised text, name of the rejecting filter or None, reason)."""
        norm = normalize(text)
        for f in self.filters:
            reason = f.check(norm)
            if reason is not None:
                return norm, f.name, reason
        return norm, None, None

    def counters(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for f in self.filters:
            out[f"filter/{f.name}/passed"] = float(f.passed)
            out[f"filter/{f.name}/rejected"] = float(f.rejected)
        return out

    def log_counters(self, step: int | None = None, since: dict[str, float] | None = None) -> None:
        now = self.counters()
        parts = []
        for f in self.filters:
            p = now[f"filter/{f.name}/passed"] - (since or {}).get(f"filter/{f.name}/passed", 0)
            r = now[f"filter/{f.name}/rejected"] - (since or {}).get(f"filter/{f.name}/rejected", 0)
            parts.append(f"{f.name} {int(p)}/{int(p + r)}")
        log.info("text filters%s (passed/seen): %s", "" if step is None else f" step {step}", ", ".join(parts))


class DifficultyFilter:
    """Keep a prompt for training when its agreement (or accuracy) lies in [low, high].

    Both bounds are inclusive; above ``high`` is "too_easy", below ``low`` "too_hard".
    """

    def __init__(self, low: float = 0.2, high: float = 0.8):
        if not 0.0 <= low <= high <= 1.0:
            raise ValueError(f"difficulty bounds must satisfy 0 <= low <= high <= 1, got [{low}, {high}]")
        self.low, self.high = low, high
        self.kept = self.too_easy = self.too_hard = 0

    def check(self, agreement: float) -> tuple[bool, str | None]:
        if agreement > self.high + 1e-12:
            self.too_easy += 1
            return False, "too_easy"
        if agreement < self.low - 1e-12:
            self.too_hard += 1
            return False, "too_hard"
        self.kept += 1
        return True, None

    def counters(self) -> dict[str, float]:
        return {
            "filter/difficulty/kept": float(self.kept),
            "filter/difficulty/too_easy": float(self.too_easy),
            "filter/difficulty/too_hard": float(self.too_hard),
        }
