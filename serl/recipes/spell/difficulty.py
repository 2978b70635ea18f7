"""How a self-play questioner is rewarded for the difficulty of its question, from the
responder's mean score r over its samples (``--questioner_reward`` of the SPELL recipe).

0 when every response is right or every one wrong (no signal), else by mapping: ``gaussian``
(SPELL, Tongyi-Zhiwen 2025: exp(-(r - 0.5)^2 / (2 sigma^2)) with sigma 1/6, a bump at 0.5),
``azr`` (Absolute Zero's learnability, 1 - r) or ``rzero`` (R-Zero's uncertainty,
1 - 2|r - 0.5|). SPELL's code ships all three.
"""

from __future__ import annotations

import math

QUESTIONER_SIGMA = 1 / 6
QUESTIONER_MAPPINGS = ("gaussian", "azr", "rzero")


def difficulty_reward(mean_score: float, sigma: float = QUESTIONER_SIGMA, mapping: str = "gaussian") -> float:
    """0 when every response is right or every one wrong, else by ``mapping``: ``gaussian``
    (SPELL: a bump at 0.5 of width ``sigma``), ``azr`` (Absolute Zero's learnability, 1 - r)
    or ``rzero`` (R-Zero's uncertainty, 1 - 2|r - 0.5|)."""
    if not 0.0 <= mean_score <= 1.0:
        raise ValueError(f"mean responder score must lie in [0, 1], got {mean_score}")
    if mean_score in (0.0, 1.0):
        return 0.0
    if mapping == "azr":
        return 1.0 - mean_score
    if mapping == "rzero":
        return 1.0 - 2.0 * abs(mean_score - 0.5)
    if mapping != "gaussian":
        raise ValueError(f"unknown questioner reward mapping {mapping!r}; expected one of {QUESTIONER_MAPPINGS}")
    return math.exp(-((mean_score - 0.5) ** 2) / (2 * sigma**2))
