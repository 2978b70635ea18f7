import operator
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from serl.rewards import EquivalenceChecker
from serl.rewards.equivalence import RewardPoolError
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
            out.append(("-" if n < 0 else "") + f"\\frac{{{abs(n)}}}{{{d}}}")
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


@pytest.mark.parametrize("kwargs", [{"timeout": 0}, {"workers": 0}, {"max_start_failures": 0}, {"start_timeout": 0}])
def test_bad_settings(kwargs):
    with pytest.raises(ValueError):
        EquivalenceChecker(**kwargs)


def test_thread_safe(checker):
    from concurrent.futures import ThreadPoolExecutor

    pairs = [(f"\\frac{{{k}}}{{2}}", str(k / 2)) for k in range(1, 9)]
    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(lambda p: checker.equal(*p), pairs))
    assert results == [True] * 8


# -- a pool that fails loudly ------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
USER_SCRIPT = textwrap.dedent("""\
    from serl.rewards import EquivalenceChecker, score_groups
    with open("runs.log", "a") as f:  # a side effect: must happen once, not once per worker
        f.write("ran\\n")
    c = EquivalenceChecker()
    print(score_groups([["\\\\boxed{\\\\sqrt{4}}", "\\\\boxed{2}", "\\\\boxed{3}"]], None, c)[0].rewards)
    print(c.stats["restarts"], c.stats["crashes"], c.stats["start_failures"])
""")


def _python(tmp_path, args, stdin=None, pythonpath=()):
    keep = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []  # an install by --target
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*map(str, pythonpath), str(ROOT), *keep]))
    return subprocess.run(
        [sys.executable, *args], cwd=tmp_path, input=stdin, env=env, capture_output=True, text=True, timeout=180
    )


@pytest.mark.parametrize("how", ["file", "stdin", "module"])
def test_script_without_main_guard(tmp_path, how):
    """A plain script using the checker at module level: the workers must not re-run it."""
    (tmp_path / "user_script.py").write_text(USER_SCRIPT)
    if how == "file":
        r = _python(tmp_path, ["user_script.py"])
    elif how == "stdin":
        r = _python(tmp_path, ["-"], stdin=USER_SCRIPT)
    else:
        r = _python(tmp_path, ["-m", "user_script"], pythonpath=[tmp_path])
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["[1.0, 1.0, 0.0]", "0 0 0"]
    assert "Traceback" not in r.stderr
    assert (tmp_path / "runs.log").read_text() == "ran\n"


def _fake_math_verify(tmp_path, body: str) -> Path:
    pkg = tmp_path / "fake" / "math_verify"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(body)
    (pkg / "parser.py").write_text("parse_expr = None\n")  # the worker's guards patch it
    return pkg.parent


def test_workers_that_cannot_start_raise_one_clear_error(tmp_path):
    """math-verify broken in the workers' Python: K start failures, then one error."""
    fake = _fake_math_verify(tmp_path, "raise ImportError('math_verify is broken here')\n")
    script = textwrap.dedent("""\
        from serl.rewards import EquivalenceChecker
        from serl.rewards.equivalence import WorkerStartError
        c = EquivalenceChecker(workers=2, max_start_failures=3)
        try:
            c.equal("\\\\sqrt{4}", "2")
        except WorkerStartError as e:
            print("ERROR", e)
        print(c.stats["start_failures"], c.stats["restarts"])
    """)
    r = _python(tmp_path, ["-"], stdin=script, pythonpath=[fake])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("ERROR reward worker processes failed to start 3 times in a row")
    assert "import math_verify" in lines[0]
    assert lines[1] == "3 2"  # 3 failures, 2 restarts in between, then the error
    assert "math_verify is broken here" in r.stderr  # the workers' own error is shown


FAKE_VERIFY = """\
class LatexExtractionConfig:
    pass
def parse(s, *args, **kwargs):
    return [s[len("\\\\boxed{"):-1]]
def verify(a, b, **kwargs):
    if "boom" in a[0] + b[0]:
        raise ValueError("math-verify failed on this input")
    return a[0].replace(" ", "") == b[0].replace(" ", "")
"""


def test_a_check_that_raises_is_unequal_and_counted(tmp_path):
    fake = _fake_math_verify(tmp_path, FAKE_VERIFY)
    script = textwrap.dedent("""\
        from serl.rewards import EquivalenceChecker
        with EquivalenceChecker(workers=1) as c:
            print(c.equal_many([("x + y", "x+y"), ("boom", "x+y"), ("x+y", "x-y")]))
            print(c.stats["check_errors"], c.stats["crashes"])
    """)
    r = _python(tmp_path, ["-"], stdin=script, pythonpath=[fake])
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["[True, False, False]", "1 0"]


class _Boom:
    """Unpickling it in the worker raises: the worker dies outside any check."""

    def __reduce__(self):
        return operator.truediv, (1, 0)


@pytest.mark.parametrize(
    "job, message",
    [
        ({"kind": "no-such-kind", "strings": []}, "a reward worker failed on a job: ValueError"),
        ({"kind": "pairs", "strings": ["1", "2"], "pairs": [(0, 1)], "poison": _Boom()}, "died 3 times"),
    ],
)
def test_a_job_the_pool_cannot_finish_raises(job, message):
    with EquivalenceChecker(timeout=2.0, workers=1) as ch:
        assert ch.healthy()
        with pytest.raises(RewardPoolError, match=message):
            ch.run_jobs([job])
        assert ch._slots == []  # torn down: no stale reply can answer the next call
        assert ch.equal("\\sqrt{4}", "2") and ch.healthy()  # a fresh pool on the next call
