"""The indexed clustering gives the naive loop's clusters with far fewer checks."""

import random

import pytest

from serl.rewards.cluster import cluster
from serl.rewards.normalize import cheap_compare


def naive(job, equal):
    """The first version's loop: every answer against every representative."""
    reps, cluster_of = [], []
    for i in range(len(job["strings"])):
        if i == job.get("label"):
            cluster_of.append(-1)
            continue
        for c, r in enumerate(reps):
            if equal(job, r, i):
                cluster_of.append(c)
                break
        else:
            cluster_of.append(len(reps))
            reps.append(i)
    return cluster_of


def counting_equal(calls):
    """Cheap rules, then a stand-in for math-verify: equal when the answers
    round to the same value at 1e-3, or both spell the same letter."""

    def equal(job, i, j):
        calls.append((i, j))
        a, b = job["strings"][i], job["strings"][j]
        cheap = cheap_compare(a, b)
        if cheap is not None:
            return cheap

        def key(s):
            s = s.replace("\\sqrt{4}", "2").replace("x=", "")
            try:
                return round(float(s), 3)
            except ValueError:
                return s.strip().lower()

        return key(a) == key(b)

    return equal


POOL = [
    "1",
    "2",
    "2.0",
    "2.00001",
    "2.0001",
    "\\frac{4}{2}",
    "4/2",
    "-2",
    "0.5",
    "1/2",
    "\\frac12",
    "x=2",
    "\\sqrt{4}",
    "",
    "\\text{}",
    ".",
    "A",
    "a",
    "1,000",
    "1000",
    "999.99999",
    "1000.0",
    "3.14159",
    "3.1416",
    "\\pi",
    "x",
    "-0",
    "0",
    "0.0",
    "100000000000000000000000000000",
    "1e3",
    "10^3",
]


@pytest.mark.parametrize("seed", range(40))
def test_same_clusters_as_the_naive_loop(seed):
    rng = random.Random(seed)
    strings = [rng.choice(POOL) for _ in range(rng.randint(1, 30))]
    label = rng.choice([None, 0, len(strings) - 1])
    job = {"strings": strings, "label": label}
    fast_calls, slow_calls = [], []
    got = cluster(dict(job), counting_equal(fast_calls))["cluster_of"]
    assert got == naive(dict(job), counting_equal(slow_calls))
    assert len(fast_calls) <= len(slow_calls) + (len(strings) if label is not None else 0)


@pytest.mark.parametrize("n", [500, 2000])
def test_distinct_numbers_take_a_linear_number_of_checks(n):
    # old loop: n*(n-1)/2 checks (1,999,000 for n = 2000), a minute of work in one request
    strings = [str(k) for k in range(n)] + [f"{k}.5" for k in range(n)]
    strings += [f"\\frac{{{7 * k + 1}}}{{7}}" for k in range(n)]
    calls = []
    out = cluster({"strings": strings, "label": None}, counting_equal(calls))
    assert out["cluster_of"] == list(range(len(strings)))
    assert len(calls) <= 2 * len(strings)


def test_hand_worked_group():
    # 2, 2.0 and \frac{4}{2} are one cluster by value; 2.0001 is within the decimal tolerance of 2,
    # so the stand-in decides (equal at 1e-3); 1/2 joins 0.5; empty is alone; x=2 goes to the stand-in
    strings = ["2", "0.5", "2.0", "2.0001", "1/2", "\\frac{4}{2}", "", "x=2"]
    calls = []
    out = cluster({"strings": strings, "label": None}, counting_equal(calls))
    assert out["cluster_of"] == [0, 1, 0, 0, 1, 0, 2, 0]
