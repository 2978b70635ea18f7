"""One ``serl serve-reward`` request body, read and checked (see :mod:`serl.rewards.server`).

The limits come first: the sample count is checked as soon as the JSON is decoded and
each text's length before any text is looked at, so an oversized request costs one
C-speed decode (bounded by the body limit), not per-sample work (10^6 empty strings
took 20 s to refuse when they were counted last)."""

from __future__ import annotations

import json
import math

from serl.rewards.httpd import BadRequest


class TooLarge(BadRequest):
    """A request over a size limit (413), counted in ``refused_too_large``."""


def response_text(query: str, prompt: str) -> str:
    """The part of ``query`` the model wrote (see module doc)."""
    if query.startswith(prompt):
        return query[len(prompt) :]
    k = query.find(prompt) if prompt else -1
    if k >= 0:
        return query[k + len(prompt) :]
    n = 0
    for a, b in zip(query, prompt):
        if a != b:
            break
        n += 1
    return query[n:]


def _label(i: int, v):
    """One label as text (or None); refuses what cannot be a reference answer."""
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, float) and not math.isfinite(v):  # NaN, Infinity or an overflow such as 1e999
        raise BadRequest(f"field 'labels'[{i}] must be a finite number, got {v!r}")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise BadRequest(f"field 'labels'[{i}] must be a string, number or null, got {type(v).__name__}")
    return str(v)


def parse_request(
    body: bytes, max_samples: int | None = None, max_query_chars: int | None = None
) -> tuple[list[str], list[str], list[str | None]]:
    """Validate a request body; raises BadRequest naming the field at fault (TooLarge: 413)."""
    try:
        data = json.loads(body)
    except RecursionError:
        raise BadRequest("body is not valid JSON: nested too deeply") from None
    except ValueError as e:  # bad JSON or UTF-8, or an integer too long to convert
        raise BadRequest(f"body is not valid JSON: {str(e)[:200]}") from None
    if not isinstance(data, dict):
        raise BadRequest("body must be a JSON object with 'query', 'prompts', 'labels'")
    queries = data.get("query", data.get("queries"))
    if not isinstance(queries, list):
        raise BadRequest("field 'query' must be a list of strings")
    n = len(queries)
    if max_samples is not None and n > max_samples:
        raise TooLarge(
            f"request has {n} samples; this server scores at most {max_samples} per request "
            f"(--max_samples): split it into smaller requests",
            413,
        )
    prompts = data.get("prompts")
    if prompts is None:
        raise BadRequest("field 'prompts' is required (answers are never read from the prompt)")
    if not isinstance(prompts, list) or len(prompts) != n:
        raise BadRequest(f"field 'prompts' must be a list of {n} strings")
    labels = data.get("labels")
    if labels is None:
        labels = [None] * n
    if not isinstance(labels, list) or len(labels) != n:
        raise BadRequest(f"field 'labels' must be a list of {n} entries (null for none)")
    for name, seq in (("query", queries), ("prompts", prompts)):
        for i, v in enumerate(seq):
            if not isinstance(v, str):
                raise BadRequest(f"field '{name}'[{i}] must be a string, got {type(v).__name__}")
            if max_query_chars is not None and len(v) > max_query_chars:
                raise TooLarge(
                    f"field '{name}'[{i}] has {len(v)} characters; at most {max_query_chars} are "
                    f"accepted (--max_query_kb)",
                    413,
                )
    return queries, prompts, [_label(i, v) for i, v in enumerate(labels)]
