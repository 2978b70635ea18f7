"""Cheap answer comparison that runs before math-verify.

``normalize(s)`` removes presentation-only LaTeX (``$``, ``\\left``/``\\right``,
thin spaces, ``\\dfrac``/``\\tfrac``, ``\\text{}`` around plain words, spaces,
a trailing full stop, thousands commas in a plain number).  Two answers whose
normal forms are equal are equal; nothing here ever decides that two answers
differ, except for two plain integers of at most 15 digits, where math-verify
agrees exactly (they are compared as Python ints).  Everything else goes to
math-verify.  All of it is linear time.
"""
from __future__ import annotations

import re

_DROP = re.compile(r"\\left|\\right|\\!|\\,|\\;|\\:|\\ |\\displaystyle|\$")
_FRAC = re.compile(r"\\[dt]frac")
_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_SPACE = re.compile(r"\s+")
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_INT = re.compile(r"-?\d{1,15}")


def normalize(answer: str) -> str:
    s = _DROP.sub("", answer)
    s = _FRAC.sub(r"\\frac", s)
    s = _TEXT.sub(r"\1", s)
    s = _SPACE.sub("", s)
    s = s.rstrip(".")
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    return s


def cheap_compare(a: str, b: str) -> bool | None:
    """True / False when the cheap rules decide, None when math-verify must."""
    na, nb = normalize(a), normalize(b)
    if na == nb:
        return bool(na)
    if _INT.fullmatch(na) and _INT.fullmatch(nb):
        return int(na) == int(nb)
    return None
