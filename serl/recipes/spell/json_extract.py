"""Pull a JSON object with given fields out of messy model text.

Self-play roles that must write a JSON block (SPELL's questioner, Tongyi-Zhiwen 2025,
ends with ``{"question": ..., "answer": ...}``) count an unparseable one as bad format.
Small models wrap the block in code fences, add prose, use single quotes, leave trailing
commas or write several blocks, so we look harder than ``json.loads`` first:

1. Keep the text after the last ``</think>``; an unclosed ``<think>`` finds nothing.
2. Look at the last ``max_chars`` characters only (the block is at the end), and
   find every balanced top-level ``{...}`` span in one linear pass (braces inside
   double-quoted strings do not count).
3. From the last span backwards, try ``json.loads``; then the same after repairs:
   curly quotes to straight, trailing commas removed, single-quoted strings turned
   into JSON strings, bare keys quoted, and last a double quote inside a string that
   does not end it escaped (``"answer": "the "Star" inn"``). The first span that yields an object with
   every wanted field (keys matched without case or spaces) as a non-empty string
   (or, for ``numeric`` fields, a number) wins.

Nothing is ever evaluated; the work is linear in ``max_chars`` times the (bounded)
number of spans tried.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

MAX_CHARS = 8000  # tail of the response that is searched
MAX_SPANS = 16  # at most this many {...} spans are tried, last first

_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_BARE_KEY = re.compile(r"([{,]\s*)([A-Za-z_][A-Za-z0-9_]*)(\s*:)")
_CURLY = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"})


def _scan(text: str) -> tuple[list[str], int]:
    """Balanced top-level {...} spans in order, and where an unclosed '{' began (-1 if none).
    Braces inside "strings" are skipped."""
    out, depth, start, in_str, esc = [], 0, -1, False, False
    for i, c in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"' and depth > 0:
            in_str = True
        elif c == "{":
            if depth == 0:
                start = i
            depth += 1
        elif c == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                out.append(text[start : i + 1])
    return out, (start if depth > 0 else -1)


def _spans(text: str, max_restarts: int = 8) -> list[str]:
    """Spans of :func:`_scan`; a stray unclosed '{' (prose such as "use {x") would hide
    everything after it, so the scan restarts just past it, a bounded number of times."""
    out: list[str] = []
    for _ in range(max_restarts + 1):
        found, unclosed = _scan(text)
        out.extend(found)
        if unclosed < 0:
            break
        text = text[unclosed + 1 :]
    return out


def _single_to_double(s: str) -> str:
    """Turn 'single-quoted' strings into JSON strings. A quote inside such a string
    ends it only when the next non-space character is , : } ] or the end, so an
    apostrophe ('Tobin's job') stays text."""
    out, i, n = [], 0, len(s)
    while i < n:
        c = s[i]
        if c == '"':  # copy a double-quoted string as is
            j = i + 1
            while j < n and s[j] != '"':
                j += 2 if s[j] == "\\" else 1
            out.append(s[i : j + 1])
            i = j + 1
            continue
        if c != "'":
            out.append(c)
            i += 1
            continue
        buf, j = [], i + 1
        while j < n:
            d = s[j]
            if d == "\\" and j + 1 < n:
                buf.append("'" if s[j + 1] == "'" else s[j : j + 2])
                j += 2
                continue
            if d == "'":
                rest = s[j + 1 :].lstrip()
                if not rest or rest[0] in ",:}]":
                    break
            buf.append('\\"' if d == '"' else d)
            j += 1
        out.append('"' + "".join(buf) + '"')
        i = j + 1
    return "".join(out)


def _escape_inner_quotes(s: str) -> str:
    """Escape a '"' inside a string that does not end it: a quote ends a string only when
    the next non-space character is , : } ] or the end (so 'the "Star" inn' stays text)."""
    out, in_str, i, n = [], False, 0, len(s)
    while i < n:
        c = s[i]
        if in_str and c == "\\" and i + 1 < n:
            out.append(s[i : i + 2])
            i += 2
            continue
        if c == '"':
            if not in_str:
                in_str = True
            else:
                rest = s[i + 1 : i + 200].lstrip()  # a bounded look-ahead
                if rest and rest[0] not in ",:}]":
                    c = '\\"'
                else:
                    in_str = False
        out.append(c)
        i += 1
    return "".join(out)


def _loads(span: str):
    fixed = _TRAILING_COMMA.sub(r"\1", span.translate(_CURLY))
    attempts = [span, fixed]
    if "'" in fixed:
        attempts.append(_TRAILING_COMMA.sub(r"\1", _single_to_double(fixed)))
    attempts.append(_BARE_KEY.sub(r'\1"\2"\3', attempts[-1]))
    for a in attempts:
        try:
            return json.loads(a)
        except (json.JSONDecodeError, RecursionError):
            continue
    try:  # the last resort, built only when all else failed
        return json.loads(_escape_inner_quotes(attempts[-1]))
    except (json.JSONDecodeError, RecursionError):
        return None


def _fields(obj, fields, numeric) -> dict | None:
    if not isinstance(obj, dict):
        return None
    keys = {str(k).strip().lower(): v for k, v in obj.items()}
    out = {}
    for name in fields:
        v = keys.get(name.lower())
        if isinstance(v, (int, float)) and not isinstance(v, bool) and name in numeric:
            v = str(v)
        if not isinstance(v, str) or not v.strip():
            return None
        out[name] = v.strip()
    return out


def extract_json_fields(
    text: str, fields: Sequence[str], numeric: Sequence[str] = (), max_chars: int = MAX_CHARS
) -> dict[str, str] | None:
    """``{field: text}`` from the last JSON object holding every one of ``fields`` as a
    non-empty string (``numeric`` fields may be numbers, returned as text), or None."""
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    elif "<think>" in text:
        return None
    for span in reversed(_spans(text[-max_chars:])[-MAX_SPANS:]):
        found = _fields(_loads(span), fields, numeric)
        if found is not None:
            return found
    return None
