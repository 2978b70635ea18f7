"""Cheap answer comparison that runs before math-verify.

``normalize(s)`` removes presentation-only LaTeX (``$``, ``\\left``/``\\right``,
thin spaces, ``\\dfrac``/``\\tfrac``, ``\\text{}`` around plain words, spaces,
a trailing full stop, thousands commas in a plain number).  Two answers whose
normal forms are equal are equal.

Plain numbers (``-12``, ``0.5``, ``3/4``, ``\\frac{3}{4}``, ``\\frac34``, at most
30 digits) are compared as exact fractions, which is what math-verify does for
them: two exact rationals are equal iff the fractions are; with a decimal
involved, equal fractions are equal, a relative difference above 1e-4 is
"not equal" (math-verify rounds floats to 6 decimals and 15 digits, so it
agrees), and anything closer is left to math-verify.  ``test_equivalence``
checks this agreement against math-verify itself.  Everything else goes to
math-verify.  All of it is linear time.

Empty answers (``is_empty``): an answer with nothing a reader would see in it,
once presentation is removed (``\\text{}``, ``.``, ``$$``, ``\\,``, ``{}``, ``~``,
``\\quad``, ``\\boxed{}`` and the like), is no answer at all.  This is the one
place that rule is decided: ``extract_answer`` returns ``None`` for such an
answer, the vote counts one it is handed as unanswered (``n_no_answer``, reward
0, never in a cluster), and ``cheap_compare`` says it equals nothing, itself
included.  So empty answers can never form the majority, and never match a label.
The set-braces ``\\{\\}`` (the empty set) are an answer.
"""

from __future__ import annotations

import re
from fractions import Fraction

_DROP = re.compile(r"\\left|\\right|\\!|\\,|\\;|\\:|\\ |\\displaystyle|\$")
_FRAC = re.compile(r"\\[dt]frac")
_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_SPACE = re.compile(r"\s+")
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_INT = re.compile(r"-?\d{1,30}")
_DEC = re.compile(r"-?\d{1,30}\.\d{1,30}")
_SLASH = re.compile(r"(-?\d{1,30})/(\d{1,30})")
# What is left once these go has to be empty for an answer to be empty: braces of
# groups (not the escaped set braces), formatting and spacing commands, ~ and dots.
_NO_CONTENT = re.compile(
    r"(?<!\\)[{}]|[~.]"
    r"|\\(?:text[a-z]*|math(?:rm|bf|it|sf|tt|normal)|mbox|boxed|fbox|quad|qquad|enspace|phantom|strut)(?![A-Za-z])"
)
_FRAC_NUM = re.compile(r"(-?)\\frac(?:\{(\d{1,30})\}|(\d))(?:\{(\d{1,30})\}|(\d))")


def normalize(answer: str) -> str:
    s = _DROP.sub("", answer)
    s = _FRAC.sub(r"\\frac", s)
    s = _TEXT.sub(r"\1", s)
    s = _SPACE.sub("", s)
    s = s.rstrip(".")
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    return s


def is_blank(normal: str) -> bool:
    """``is_empty`` for a string that is already a normal form."""
    return not _NO_CONTENT.sub("", normal)


def is_empty(answer: str) -> bool:
    """True for an answer with nothing in it (see the module doc): it is no answer."""
    return is_blank(normalize(answer))


def cheap_compare(a: str, b: str) -> bool | None:
    """True / False when the cheap rules decide, None when math-verify must.

    An empty answer equals nothing, not even another empty answer."""
    na, nb = normalize(a), normalize(b)
    if is_blank(na) or is_blank(nb):
        return False
    if na == nb:
        return True
    x, y = plain_number(na), plain_number(nb)
    if x is None or y is None:
        return None
    (fx, exact_x), (fy, exact_y) = x, y
    if fx == fy:
        return True
    if exact_x and exact_y:
        return False
    if abs(fx - fy) > Fraction(1, 10**4) * max(Fraction(1), abs(fx), abs(fy)):
        return False
    return None


def plain_number(s: str) -> tuple[Fraction, bool] | None:
    """(value, exact) for a plain number; exact is False for decimals."""
    if _INT.fullmatch(s):
        return Fraction(int(s)), True
    if _DEC.fullmatch(s):
        return Fraction(s), False
    m = _SLASH.fullmatch(s)
    if m and int(m.group(2)) != 0:
        return Fraction(int(m.group(1)), int(m.group(2))), True
    m = _FRAC_NUM.fullmatch(s)
    if m:
        num, den = int(m.group(2) or m.group(3)), int(m.group(4) or m.group(5))
        if den != 0:
            return Fraction(-num if m.group(1) else num, den), True
    return None
