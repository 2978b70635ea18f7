"""ROUGE-L novelty index: is a candidate too close to any problem the run knows?

Scores come from the ``rouge-score`` package (its tokenizer and its LCS routine), so
the numbers are the ones everybody reports. What we add is speed as the pool grows:

* every known text is tokenised once, when it is added;
* ROUGE-L F1 (beta = 1) equals ``2 * LCS / (len_a + len_b)``, and the LCS can never
  exceed the multiset overlap of the two token lists. An inverted index gives that
  overlap for all known texts at once (numpy), and the exact LCS is computed only for
  the few texts whose bound could beat the threshold. The answer is the same as
  scoring every pair; only the work differs.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
from rouge_score import rouge_scorer

_EPS = 1e-9  # float slack: an F1 that equals the threshold on paper must pass


class RougeIndex:
    """Known texts, tokenised once, with a token -> (text id, count) inverted index."""

    def __init__(self, threshold: float = 0.7):
        self.threshold = threshold
        self._scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
        self._tokens: list[list[str]] = []
        self._lengths: list[int] = []
        self._postings: dict[str, tuple[list[int], list[int]]] = {}
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # cache, cleared on add

    def __len__(self) -> int:
        return len(self._tokens)

    def tokenize(self, text: str) -> list[str]:
        return self._scorer._tokenizer.tokenize(text)

    def add(self, text: str) -> None:
        toks = self.tokenize(text)
        doc = len(self._tokens)
        self._tokens.append(toks)
        self._lengths.append(len(toks))
        for tok, cnt in Counter(toks).items():
            ids, cnts = self._postings.setdefault(tok, ([], []))
            ids.append(doc)
            cnts.append(cnt)
            self._arrays.pop(tok, None)

    def _posting_arrays(self, tok: str) -> tuple[np.ndarray, np.ndarray]:
        arr = self._arrays.get(tok)
        if arr is None:
            ids, cnts = self._postings[tok]
            arr = (np.asarray(ids, dtype=np.int64), np.asarray(cnts, dtype=np.int64))
            self._arrays[tok] = arr
        return arr

    def best_match(self, text: str) -> tuple[float, int | None]:
        """Highest ROUGE-L F1 of ``text`` against known texts that could exceed the
        threshold, and the index of that text. (0.0, None) when none could."""
        toks = self.tokenize(text)
        if not toks or not self._tokens:
            return 0.0, None
        overlap: Any = np.zeros(len(self._tokens), dtype=np.int64)
        for tok, cnt in Counter(toks).items():
            if tok in self._postings:
                ids, cnts = self._posting_arrays(tok)
                overlap[ids] += np.minimum(cnts, cnt)
        lengths = np.asarray(self._lengths, dtype=np.float64)
        bound = 2.0 * overlap / (len(toks) + lengths)
        candidates = np.nonzero(bound > self.threshold + _EPS)[0]
        # Check the most promising first; stop as soon as one is over the threshold.
        best, best_i = 0.0, None
        for i in candidates[np.argsort(-bound[candidates], kind="stable")]:
            f = rouge_scorer._score_lcs(self._tokens[i], toks).fmeasure
            if f > best:
                best, best_i = f, int(i)
            if best > self.threshold + _EPS:
                break
        return best, best_i

    def too_similar(self, text: str) -> tuple[bool, float, int | None]:
        """True when some known text has ROUGE-L F1 > threshold with ``text``."""
        score, idx = self.best_match(text)
        return score > self.threshold + _EPS, score, idx

    def brute_force_max(self, text: str) -> float:
        """Max F1 over every known text, pair by pair (for tests and timing)."""
        toks = self.tokenize(text)
        return max((rouge_scorer._score_lcs(t, toks).fmeasure for t in self._tokens), default=0.0)
