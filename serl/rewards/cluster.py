"""Greedy clustering of a group's distinct answers, in near-linear time for numbers.

The rule (unchanged from the first version): answers are visited in order; each
joins the first cluster whose representative (its first member) it equals, else
opens a new cluster.  Done naively that is one check per (answer, cluster) pair:
with k distinct plain numbers, k^2/2 cheap comparisons (2,000 distinct answers
took over a minute in one request and stalled the reward server).

Most of those checks are already decided "not equal" by the cheap rules of
:mod:`serl.rewards.normalize` from the two normal forms alone: a different plain
number that is exact on both sides, or further apart than the decimal tolerance.
So the representatives are indexed by normal form and by numeric value, and an
answer is checked only against the representatives the cheap rules could call
equal or cannot decide (same normal form, same value, a value within the
tolerance where one side is a decimal, or any non-number), in cluster order.
The clusters found are exactly those of the naive loop; only checks whose answer
was already known are skipped.  An answer that is not a plain number must still
be checked against every representative (math-verify decides those), which is
why the reward server also bounds the distinct answers per group.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from fractions import Fraction

from serl.rewards.normalize import is_blank, normalize, plain_number


def _near(values: list, x: Fraction) -> list[int]:
    """Cluster ids of ``values`` (sorted (value, cluster) pairs) that the cheap
    rules may call equal to ``x``: |x - y| <= 1e-4 * max(1, |x|, |y|) implies
    |x - y| <= 1e-4 * max(1, |x|) / (1 - 1e-4), the window searched."""
    w = max(Fraction(1), abs(x)) / 9999
    lo = bisect_left(values, (x - w, -1))
    hi = bisect_right(values, (x + w, float("inf")))
    return [c for _, c in values[lo:hi]]


def cluster(job: dict, equal) -> dict:
    """``{"cluster_of": [...], "label_match": [...] | None}`` for a worker's group job.

    ``equal(job, i, j)`` is the full check (cheap rules, then math-verify);
    it is called only where the cheap rules do not already say "not equal".
    """
    strings = job["strings"]
    label = job.get("label")
    reps: list[int] = []  # cluster id -> index of its representative
    cluster_of: list[int] = []
    by_normal: dict[str, int] = {}  # normal form -> first cluster with it
    by_value: dict[Fraction, int] = {}  # plain-number value -> first cluster with it
    all_values: list[tuple[Fraction, int]] = []  # (value, cluster), sorted
    decimal_values: list[tuple[Fraction, int]] = []  # the same, decimals only
    others: list[int] = []  # clusters whose representative is not a plain number
    nonblank: list[int] = []  # clusters whose representative is not empty
    for i, s in enumerate(strings):
        if i == label:
            cluster_of.append(-1)
            continue
        normal = normalize(s)
        number = None if is_blank(normal) else plain_number(normal)
        if is_blank(normal):
            candidates: list[int] = []  # an empty answer equals nothing
        elif number is None:
            # not a plain number: every non-empty representative may be equal
            candidates = nonblank
        else:
            value, exact = number
            found = {c for c in (by_normal.get(normal), by_value.get(value)) if c is not None}
            found.update(_near(decimal_values if exact else all_values, value))
            found.update(others)
            candidates = sorted(found)
        for c in candidates:
            if equal(job, reps[c], i):
                cluster_of.append(c)
                break
        else:
            c = len(reps)
            cluster_of.append(c)
            reps.append(i)
            if is_blank(normal):
                continue
            by_normal.setdefault(normal, c)
            nonblank.append(c)
            if number is None:
                others.append(c)
            else:
                value, exact = number
                by_value.setdefault(value, c)
                insort(all_values, (value, c))
                if not exact:
                    insort(decimal_values, (value, c))
    out = {"cluster_of": cluster_of, "label_match": None}
    if label is not None:
        out["label_match"] = [False if i == label else equal(job, label, i) for i in range(len(strings))]
    return out
