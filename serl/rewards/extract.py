"""Pull the final answer out of a model response (never out of the prompt).

Rules, in order:

1. The last *complete* ``\\boxed{...}`` or ``\\fbox{...}`` (braces matched, nested
   braces kept, escaped ``\\{``/``\\}`` treated as text). An empty box is skipped.
2. The fallback, when no box was found:
   ``"none"``   -> no answer;
   ``"number"`` -> the last number in the text (``-3``, ``1,234``, ``0.5``, ``3/4``);
   ``"choice"`` -> a multiple-choice letter A-J ("answer is (C)", "Answer: C",
   else the last standalone "(C)").
   With ``"choice"`` a boxed letter (``\\boxed{C}``, ``\\boxed{\\text{(C)}}``) is
   reduced to the bare letter.

"No answer" is ``None``, never ``""`` or an empty form such as ``\\text{}``, so it can
never match another answer or be counted in a majority vote.
Everything here is linear in the text length: braces are matched with one pass
and a stack, and the regular expressions have no nested quantifiers.
"""

from __future__ import annotations

import re

from serl.rewards.normalize import is_empty

FALLBACKS = ("none", "number", "choice")
_SKIP_SCAN = 256  # boxes up to this long are tested for emptiness while searching

_BOX_CMD = re.compile(r"\\(?:boxed|fbox)\b")
_BRACE = re.compile(r"\\[{}]|[{}]")
# A number: optional sign, digits with optional thousands commas, optional
# decimals, optional "/denominator".  Not preceded by a letter or digit so
# that "x2" or "H2O" do not yield a number.
_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])(-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+(?:\.\d+)?)?)(?![A-Za-z0-9_])")
_CHOICE_STATED = re.compile(
    r"(?i:answer|option|choice)\s*(?:is|:)?\s*(?::\s*)?(?:\*\*)?\(?\s*([A-J])\s*\)?(?![A-Za-z0-9])"
)
_CHOICE_PAREN = re.compile(r"\(([A-J])\)")
_CHOICE_BOXED = re.compile(r"^\s*(?:\\text(?:bf)?\{\s*)?\(?\s*([A-J])\s*\)?\s*\}?\s*$")


def _matching_braces(text: str) -> dict[int, int]:
    """Map the index of each '{' to the index of its matching '}' (one pass over
    the braces only: the regular expression skips the rest at C speed, so a long
    answer with few braces costs milliseconds, not seconds)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE.finditer(text):
        c = m.group()
        if len(c) == 2:  # escaped brace: literal text, not structure
            continue
        if c == "{":
            stack.append(m.start())
        elif stack:
            pairs[stack.pop()] = m.start()
    return pairs


def last_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{}``/``\\fbox{}``, or None."""
    starts = [m.end() for m in _BOX_CMD.finditer(text)]
    if not starts:
        return None
    pairs = _matching_braces(text)
    for pos in reversed(starts):
        j = pos
        while j < len(text) and text[j] in " \t":
            j += 1
        if j < len(text) and text[j] == "{":
            end = pairs.get(j)
            if end is None:
                continue  # truncated box: look at an earlier one
            if end - j > _SKIP_SCAN:
                # Too long to test here (nested boxes would make it quadratic):
                # extract_answer tests the one box it returns.
                return text[j + 1 : end].strip() or None
            content = text[j + 1 : end].strip()
        else:
            # "\boxed 5" form: the next token
            m = re.match(r"[^\s$]+", text[j:])
            content = m.group(0) if m else ""
        if content and not is_empty(content):
            return content
    return None


def last_number(text: str) -> str | None:
    """The last number in ``text``, thousands commas removed; None if none."""
    found = None
    for m in _NUMBER.finditer(text):
        found = m.group(1)
    if found is None:
        return None
    return found.replace(",", "")


def last_choice(text: str) -> str | None:
    """A multiple-choice letter A-J, preferring an explicit "answer is X"."""
    stated = None
    for m in _CHOICE_STATED.finditer(text):
        stated = m.group(1)
    if stated is not None:
        return stated.upper()
    paren = None
    for m in _CHOICE_PAREN.finditer(text):
        paren = m.group(1)
    return paren


def extract_answer(text: str, fallback: str = "number") -> str | None:
    """The final answer in a response, or None when it has none.

    ``fallback`` is one of ``"none"``, ``"number"``, ``"choice"`` (see module doc).
    """
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")
    if not isinstance(text, str):
        raise TypeError(f"response must be a string, got {type(text).__name__}")
    boxed = last_boxed(text)
    if boxed is not None and is_empty(boxed):
        boxed = None  # a long box with nothing in it: as if there were none
    if boxed is not None:
        if fallback == "choice":
            m = _CHOICE_BOXED.match(boxed)
            if m:
                return m.group(1)
        return boxed
    if fallback == "number":
        return last_number(text)  # a number is never empty
    if fallback == "choice":
        return last_choice(text)
    return None


def normalize_label(label: str | None) -> str | None:
    """A reference answer in any of the usual forms, as a bare answer string.

    ``"... #### 1,234"`` (GSM8K) -> ``"1234"``; ``"... \\boxed{x}"`` -> ``"x"``;
    anything else -> stripped text.  Empty (also an empty form such as ``\\text{}``,
    see :func:`serl.rewards.normalize.is_empty`) -> None.
    """
    if label is None:
        return None
    if not isinstance(label, str):
        label = str(label)
    if "####" in label:
        tail = label.rsplit("####", 1)[1].strip()
        if re.fullmatch(r"-?[\d,]+(?:\.\d+)?", tail):
            tail = tail.replace(",", "")
        return tail if tail and not is_empty(tail) else None
    boxed = last_boxed(label)
    if boxed is not None and not is_empty(boxed):
        return boxed
    label = label.strip()
    return label if label and not is_empty(label) else None
