import pytest

from serl.rewards import extract_answer, normalize_label
from serl.rewards.extract import last_boxed
from serl.rewards.normalize import cheap_compare, is_empty


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so the answer is \\boxed{42}.", "42"),
        ("\\boxed{1} then fixed: \\boxed{2}", "2"),
        ("nested \\boxed{\\frac{1}{\\sqrt{2}}} done", "\\frac{1}{\\sqrt{2}}"),
        ("set \\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("old style \\fbox{7}", "7"),
        ("space \\boxed {x+1}", "x+1"),
        ("no brace form \\boxed 5 ok", "5"),
        ("good \\boxed{3} then truncated \\boxed{\\frac{1}{2", "3"),
        ("empty box \\boxed{} and \\boxed{  }", None),
        ("$\\boxed{\\text{(C)}}$", "\\text{(C)}"),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.parametrize(
    "text, fallback, expected",
    [
        ("The total is 1,234 apples.", "number", "1234"),
        ("We get 3 then -7.5 at the end", "number", "-7.5"),
        ("half: 3/4", "number", "3/4"),
        ("H2O and x2 are not numbers, 5 is", "number", "5"),
        ("no digits here", "number", None),
        ("The answer is 12", "none", None),
        ("\\boxed{12} and later 99", "number", "12"),
        ("The answer is (C).", "choice", "C"),
        ("Answer: B because (A) is wrong", "choice", "B"),
        ("I pick (D)", "choice", "D"),
        ("\\boxed{\\text{(C)}}", "choice", "C"),
        ("\\boxed{E}", "choice", "E"),
        ("nothing chosen", "choice", None),
        ("(K) is not an option", "choice", None),
    ],
)
def test_extract_answer(text, fallback, expected):
    assert extract_answer(text, fallback) == expected


def test_no_answer_is_none_not_empty_string():
    assert extract_answer("", "number") is None
    assert extract_answer("\\boxed{}", "none") is None


@pytest.mark.parametrize(
    "content",
    [
        "\\text{}",
        ".",
        "$$",
        "\\,",
        "{}",
        "~",
        "\\quad",
        "\\mathrm{ }",
        "\\text{\\,}",
        "\\boxed{}",
        "{\\text{}}.",
        "\\left.\\right.",
    ],
)
def test_empty_forms_are_no_answer(content):
    """Nothing but presentation in the box: no answer, and equal to nothing (itself included)."""
    assert is_empty(content)
    assert extract_answer("\\boxed{" + content + "}", "none") is None
    assert extract_answer("so \\boxed{" + content + "}", "number") is None
    assert extract_answer("first 7, then \\boxed{" + content + "}", "number") == "7"  # as for \\boxed{}
    assert extract_answer("\\boxed{5} and \\boxed{" + content + "}", "none") == "5"  # as for \\boxed{}
    assert normalize_label(content) is None and normalize_label("#### " + content) is None
    assert cheap_compare(content, content) is False and cheap_compare(content, "1") is False


@pytest.mark.parametrize("content", ["\\{\\}", "\\emptyset", "0", "x", "\\text{none}", "-", "\\infty"])
def test_small_answers_are_answers(content):
    assert not is_empty(content)
    assert extract_answer("\\boxed{" + content + "}", "none") == content


def test_long_empty_box_is_no_answer_and_nesting_stays_linear():
    import time

    assert extract_answer("7 \\boxed{" + "\\quad " * 200 + "}", "number") == "7"  # past the search's scan
    t = time.monotonic()
    assert extract_answer("\\boxed{" * 30_000 + "." + "}" * 30_000, "none") is None
    assert time.monotonic() - t < 2.0


def test_bad_fallback_is_an_error():
    with pytest.raises(ValueError, match="fallback"):
        extract_answer("1", "last")


@pytest.mark.parametrize(
    "label, expected",
    [
        ("Natalia sold 48/2 = 24 clips...\n#### 1,072", "1072"),
        ("#### -3", "-3"),
        ("the solution gives \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("  \\pi  ", "\\pi"),
        ("", None),
        (None, None),
        (7, "7"),
    ],
)
def test_normalize_label(label, expected):
    assert normalize_label(label) == expected


def test_linear_time_on_hostile_text():
    import time

    t = time.monotonic()
    extract_answer("\\boxed{" * 50_000 + "1", "number")  # 50k unclosed boxes
    extract_answer("{" * 100_000 + "}" * 100_000, "number")
    extract_answer("9" * 200_000 + "x", "number")
    assert time.monotonic() - t < 2.0
