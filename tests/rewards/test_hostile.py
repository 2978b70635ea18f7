"""Model output is untrusted: hostile answers are scored on time, with no side
effect, and leave the pool healthy."""

import os
import subprocess
import sys
import time

import pytest

from serl.rewards import EquivalenceChecker, checker_counts, score_groups
from serl.rewards.safety import guarded_parse_expr

TIMEOUT = 1.0


def hostile_answers(sentinel):
    return {
        "deep_nesting": "{" * 400 + "1" + "}" * 400,
        "deep_fracs": "\\frac{1}{" * 150 + "2" + "}" * 150,
        "huge_exponent": "9^{9^{9^9}}",
        "huge_factorial": "100000000!",
        "long_latex": "\\frac{x}{y}+" * 8000 + "1",  # ~100k characters
        "code": f"__import__('os').system('touch {sentinel}')",
        "code_expr": f"1+__import__('os').system('touch {sentinel}')",
    }


@pytest.fixture(scope="module")
def hard_checker():
    """Soft (SIGALRM) timeouts off: every hang is ended by the parent's kill."""
    ch = EquivalenceChecker(timeout=TIMEOUT, workers=2, soft_timeout=False)
    ch.healthy()  # start the pool outside the timed part
    yield ch
    ch.close()


@pytest.mark.parametrize("name", list(hostile_answers("x")))
@pytest.mark.parametrize("mode", ["equal", "group"])
def test_hostile_input_is_scored_in_time(hard_checker, tmp_path, name, mode):
    sentinel = tmp_path / "SENTINEL"
    bad = hostile_answers(sentinel)[name]
    t = time.monotonic()
    if mode == "equal":
        assert hard_checker.equal(bad, "1") is False
    else:
        (g,) = score_groups([["\\boxed{" + bad + "}", "\\boxed{2}", "\\boxed{2}"]], None, hard_checker)
        assert g.rewards == [0.0, 1.0, 1.0]
    assert time.monotonic() - t < TIMEOUT + 1.0
    assert not sentinel.exists()
    assert hard_checker.healthy()


def test_timeouts_are_counted_and_workers_replaced(hard_checker):
    before = dict(hard_checker.stats)
    assert hard_checker.equal("{" * 400 + "1" + "}" * 400, "1") is False
    assert hard_checker.stats["timeouts"] == before["timeouts"] + 1
    assert checker_counts(hard_checker)["timeouts"] == before["timeouts"] + 1  # what a step's metrics read
    assert checker_counts(object()) == {}
    assert hard_checker.stats["restarts"] == before["restarts"] + 1
    assert hard_checker.equal("\\frac{1}{2}", "0.5")


def test_soft_timeout_path(checker):
    before = checker.stats["soft_timeouts"]
    t = time.monotonic()
    assert checker.equal("{" * 400 + "1" + "}" * 400, "1") is False
    assert time.monotonic() - t < checker.timeout + 1.0
    assert checker.stats["soft_timeouts"] == before + 1 and checker.healthy()


def test_sympy_parse_expr_really_evaluates_code():
    """Why the guard exists: sympy's parser runs Python eval on its input."""
    from sympy.parsing.sympy_parser import parse_expr

    assert int(parse_expr("__import__('os').getpid()")) == os.getpid()
    with pytest.raises(ValueError, match="refused"):
        guarded_parse_expr("__import__('os').getpid()")
    assert guarded_parse_expr("1/2 + 3") * 2 == 7


def test_worker_guards_refuse_side_effects(tmp_path):
    """In a process with the worker guards installed, os.system, subprocess and
    file writes are refused (the tripwire behind the parser guards)."""
    sentinel = tmp_path / "SENTINEL"
    code = f"""
import os, subprocess
from serl.rewards.safety import install_guards
install_guards(max_memory_mb=4096)
import math_verify.parser as mvp
assert mvp.parse_expr.__name__ == "guarded_parse_expr"
for attempt in (lambda: os.system("touch {sentinel}"),
                lambda: subprocess.run(["touch", "{sentinel}"]),
                lambda: open("{sentinel}", "w")):
    try:
        attempt()
    except PermissionError:
        print("refused")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["refused"] * 3, out.stderr
    assert not sentinel.exists()
