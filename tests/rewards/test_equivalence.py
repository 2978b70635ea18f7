import pickle

import pytest

from serl.rewards import EquivalenceChecker
from serl.rewards.normalize import cheap_compare, normalize


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ("\\frac{1}{2}", "0.5", True),
        ("\\frac{1}{2}", "1/2", True),
        ("0.5", "1/2", True),
        ("\\dfrac12", "\\frac{1}{2}", True),
        ("\\frac{\\sqrt{2}}{2}", "\\sqrt{2}/2", True),
        ("12", "12.0", True),
        ("x=3", "3", True),
        ("\\{1,2\\}", "\\{2,1\\}", True),
        ("3", "4", False),
        ("\\pi", "3", False),
        ("\\frac{1}{3}", "0.5", False),
        ("1000000001", "1000000000", False),
    ],
)
def test_equal(checker, a, b, expected):
    assert checker.equal(a, b) is expected


def test_equal_many_matches_equal_and_counts(checker):
    pairs = [("\\frac{1}{2}", "0.5"), ("7", "7"), ("2", "3"), ("\\sqrt{4}", "2"), ("a", "b")]
    before = dict(checker.stats)
    got = checker.equal_many(pairs)
    assert got == [True, True, False, True, False]
    assert checker.stats["calls"] - before["calls"] == 5
    # 1/2 = 0.5, "7" = "7" and 2 != 3 are decided by the cheap number rules;
    # two pairs needed math-verify.
    assert checker.stats["string_matches"] - before["string_matches"] == 2
    assert checker.stats["verify_calls"] - before["verify_calls"] == 2


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ("$\\left( 1, 2 \\right)$", "(1,2)", True),
        ("1,000", "1000", True),
        ("\\text{east}", "east", True),
        ("12.", "12", True),
        ("007", "7", True),
        ("12", "13", False),
        ("0.5", "1/2", True),
        ("\\frac34", "0.75", True),
        ("0.3", "\\frac{1}{3}", False),
        ("0.333333", "\\frac{1}{3}", None),  # close: left to math-verify
        ("\\pi", "3.14", None),
        ("1,2", "12", None),  # a pair, not a thousands separator
    ],
)
def test_cheap_compare(a, b, expected):
    assert cheap_compare(a, b) is expected


def _numbers(rng, k):
    out = []
    for _ in range(k):
        kind = rng.randrange(5)
        n, d = rng.randint(-40, 40), rng.choice([1, 2, 3, 4, 5, 7, 8, 10, 16])
        if kind == 0:
            out.append(str(n))
        elif kind == 1:
            out.append(f"{n / d:.{rng.choice([1, 2, 3, 6])}f}")
        elif kind == 2:
            out.append(f"{n}/{d}")
        elif kind == 3:
            out.append(("-" if n < 0 else "") + "\\frac{%d}{%d}" % (abs(n), d))
        else:
            out.append(str(rng.randint(10**14, 10**14 + 3)))
    return out


def test_cheap_number_rules_agree_with_math_verify():
    """Whenever the cheap rules decide, math-verify must decide the same."""
    import random

    from math_verify import LatexExtractionConfig, parse, verify

    cfg = [LatexExtractionConfig()]
    rng = random.Random(0)
    xs, ys = _numbers(rng, 300), _numbers(rng, 300)
    pairs = list(zip(xs, ys)) + [(x, x.replace(".0", "")) for x in xs[:50]] + [("0.333333", "\\frac{1}{3}")]
    decided = 0
    for a, b in pairs:
        cheap = cheap_compare(a, b)
        if cheap is None:
            continue
        decided += 1
        mv = verify(parse("\\boxed{" + a + "}", cfg), parse("\\boxed{" + b + "}", cfg))
        assert cheap is mv, (a, b, cheap, mv)
    assert decided > 250


def test_normalize_is_presentation_only():
    assert normalize("$ \\dfrac{1}{2} $.") == "\\frac{1}{2}"
    assert normalize("\\left[0, 1\\right)") == "[0,1)"


def test_pickle_keeps_settings_not_processes(checker):
    clone = pickle.loads(pickle.dumps(checker))
    assert clone.timeout == checker.timeout and clone.workers == checker.workers
    assert clone._slots == []
    assert clone.stats["calls"] == 0
    clone.close()


def test_closed_checker_refuses_work():
    ch = EquivalenceChecker(timeout=1.0, workers=1)
    ch.close()
    with pytest.raises(RuntimeError, match="closed"):
        ch.equal("1/2", "0.5")


@pytest.mark.parametrize("kwargs", [{"timeout": 0}, {"workers": 0}])
def test_bad_settings(kwargs):
    with pytest.raises(ValueError):
        EquivalenceChecker(**kwargs)


def test_thread_safe(checker):
    from concurrent.futures import ThreadPoolExecutor

    pairs = [("\\frac{%d}{2}" % k, str(k / 2)) for k in range(1, 9)]
    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(lambda p: checker.equal(*p), pairs))
    assert results == [True] * 8
