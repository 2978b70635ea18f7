"""Turning a model response into a game action (SPIRAL's rule, Liu et al., 2025, own code).

The last ``\\boxed{X}`` in the response is the action ``[X]``; a response without any box that is short
(at most ``max_unboxed_words`` words) is taken whole as the action. The candidate must then match one of
the legal actions. Matching ignores case, brackets, spacing and punctuation: both sides are reduced to
their words and numbers, so ``\\boxed{Bet}``, ``\\boxed{[bet]}``, ``\\boxed{\\text{bet}}`` and ``bet`` all
give ``[bet]``, and ``\\boxed{2x5}`` gives ``[Bid: 2 x 5]`` only if the word ``bid`` is also there.

Several boxes: only the last one counts, even if it is empty or illegal (no fall-back to earlier ones).
``lenient=True`` (off by default, a documented deviation from upstream) also accepts a candidate that
contains exactly one legal action's word sequence, e.g. ``\\boxed{I bet}``. ``mention=True`` (off by
default, a further deviation for models too small to use the box at all) takes, from a response with no
usable box, the legal action named last in its final ``MENTION_CHARS`` characters.

Model output is untrusted: only the last ``MAX_SCAN_CHARS`` characters are scanned, with linear-time
string operations and no regular expression backtracking over the whole response.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

MAX_SCAN_CHARS = 20_000  # a box is looked for only in this many final characters
MAX_BOX_CHARS = 300  # longer box contents are not an action
MENTION_CHARS = 600  # mention=True looks for a named legal action in this many final characters
_LATEX_COMMAND = re.compile(r"\\[A-Za-z]{1,20}")
_TOKEN = re.compile(r"[a-z]+|\d+")

OK, ILLEGAL, MISSING = "ok", "illegal", "missing"
PARSERS = ("strict", "lenient", "mention")  # the named parsers (``--action_parser``), strictest first


def parser_options(parser: str) -> dict:
    """``parse_action`` keywords of a named parser: strict (upstream's rule), lenient or mention."""
    options = {"strict": {}, "lenient": {"lenient": True}, "mention": {"lenient": True, "mention": True}}
    if parser not in options:
        raise ValueError(f"unknown action parser {parser!r}; known: {', '.join(PARSERS)}")
    return options[parser]


@dataclass(frozen=True)
class ParsedAction:
    """``action``: the legal action chosen (exactly as the game lists it) or None; ``raw``: the
    candidate read from the response as ``[X]`` (None if nothing was found); ``status``: "ok",
    "illegal" (a candidate that is not legal) or "missing" (no box and no short answer)."""

    action: str | None
    raw: str | None
    status: str

    @property
    def valid(self) -> bool:
        return self.action is not None


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (braces balanced), or None if there is none or it is cut off."""
    text = text[-MAX_SCAN_CHARS:]
    start = text.rfind("\\boxed")
    while start != -1:
        i = start + len("\\boxed")
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            depth, j = 0, i
            end = min(len(text), i + MAX_BOX_CHARS + 2)
            while j < end:
                depth += text[j] == "{"
                depth -= text[j] == "}"
                if depth == 0:
                    return text[i + 1 : j]
                j += 1
            return None  # unbalanced or too long: no usable box
        start = text.rfind("\\boxed", 0, start)  # "\boxed" not followed by "{": look further back
    return None


def action_key(text: str) -> tuple[str, ...]:
    """Words and numbers of ``text`` in lower case, LaTeX commands dropped: what matching compares."""
    return tuple(_TOKEN.findall(_LATEX_COMMAND.sub(" ", text[: MAX_BOX_CHARS * 2]).lower()))


def _contains(seq: tuple[str, ...], sub: tuple[str, ...]) -> bool:
    return any(seq[i : i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))


def last_mention(text: str, legal_actions: Sequence[str]) -> str | None:
    """The legal action whose words occur last in the final ``MENTION_CHARS`` characters of ``text``."""
    words = action_key(text[-MENTION_CHARS:])
    best, best_end = None, -1
    for legal in legal_actions:
        key = action_key(legal)
        for i in range(len(words) - len(key), -1, -1) if key else ():
            if words[i : i + len(key)] == key:
                if i + len(key) > best_end:
                    best, best_end = legal, i + len(key)
                break
    return best


def parse_action(
    response: str,
    legal_actions: Sequence[str],
    *,
    max_unboxed_words: int = 5,
    lenient: bool = False,
    mention: bool = False,
) -> ParsedAction:
    """The action in ``response`` (see the module doc), checked against ``legal_actions``."""
    box = last_boxed(response or "")
    if box is None:
        short = (response or "").strip()
        if not short or len(short) > 20 * max_unboxed_words or len(short.split()) > max_unboxed_words:
            named = last_mention(response or "", legal_actions) if mention else None
            return ParsedAction(named, named, OK) if named else ParsedAction(None, None, MISSING)
        box = short
    inner = box.strip()
    if inner.startswith("[") and inner.endswith("]"):
        inner = inner[1:-1].strip()
    raw = f"[{inner}]"
    key = action_key(inner)
    if not key:
        return ParsedAction(None, raw, ILLEGAL)
    keys: dict = {}
    for legal in legal_actions:
        keys.setdefault(action_key(legal), legal)
    if key in keys:
        return ParsedAction(keys[key], raw, OK)
    if lenient:
        hits = [legal for k, legal in keys.items() if k and _contains(key, k)]
        if len(hits) == 1:
            return ParsedAction(hits[0], raw, OK)
    return ParsedAction(None, raw, ILLEGAL)
