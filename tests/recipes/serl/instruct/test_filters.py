import pytest

from serl.recipes.serl.instruct.filters import (
    BannedWordsFilter,
    DifficultyFilter,
    LengthFilter,
    StartFilter,
    TextFilters,
    normalize,
)


def test_normalize_collapses_whitespace_and_keeps_case():
    text = "  Find   $\\Frac{A}{B}$\n\twhen A = 3\u00a0and B = 4.  "
    assert normalize(text) == "Find $\\Frac{A}{B}$ when A = 3 and B = 4."


def test_text_filters_keep_case_of_passing_text():
    tf = TextFilters()
    norm, name, reason = tf.check("If  $X$ and $Y$ are Primes,\nwhat is XY?")
    assert (norm, name, reason) == ("If $X$ and $Y$ are Primes, what is XY?", None, None)


@pytest.mark.parametrize("n_words,ok", [(3, False), (4, True), (150, True), (151, False)])
def test_length_bounds_inclusive(n_words, ok):
    f = LengthFilter(4, 150)
    assert (f.check(" ".join(["w"] * n_words)) is None) == ok


@pytest.mark.parametrize(
    "text,hit",
    [
        ("Look at the image and count the dots.", "image"),
        ("Which PLOT shows a parabola in the plane?", "plot"),
        ("Go to the store and buy 3 apples for each of 4 friends.", "go to"),
        ("[asy] draw((0,0)--(1,1)); [/asy] Find the slope.", "[asy]"),
        ("Imagine 3 boxes with 4 balls each; how many balls?", None),  # not "image"
        ("A mapping f sends x to 2x; what is f(3)?", None),  # not "map"
        ("The profile has 12 entries; how many pairs are there?", None),  # not "file"
    ],
)
def test_banned_words_whole_words_case_insensitive(text, hit):
    reason = BannedWordsFilter().check(text)
    assert (reason is None) == (hit is None)
    if hit:
        assert reason == f"banned_word: {hit}"


@pytest.mark.parametrize(
    "text,why",
    [
        ("Write a program that prints the primes below 100.", "banned_start"),
        ("write A PROGRAM to add two numbers given as input.", "banned_start"),
        ("? What is the sum of 2 and 3 apples?", "punct_start"),
        ("- Compute the value of 7 times 8.", "punct_start"),
        ("Élise has 3 apples and buys 4 more; how many?", "non_ascii_start"),
        ("$x + 3 = 7$. What is the value of $x$?", None),
        ("Write the number 12 in base 2 using only digits.", None),
    ],
)
def test_start_filter(text, why):
    reason = StartFilter().check(text)
    assert reason is None if why is None else reason.startswith(why)


def test_duplicate_ignores_case_and_whitespace():
    tf = TextFilters()
    tf.add_known("What is the sum of the first ten positive integers?")
    _, name, _ = tf.check("what is   the SUM of the first ten positive integers?")
    assert name == "duplicate"
    _, name, _ = tf.check("What is the sum of the first eleven positive integers?")
    assert name == "rouge"  # a near copy is caught by ROUGE, not by the hash


def test_counters_per_filter():
    tf = TextFilters()
    tf.add_known("How many positive divisors does 36 have?")
    texts = [
        "Too short text",  # length
        "Draw a square with side 4 and find its area.",  # banned
        "(a) Find the area of a square of side 4 cm.",  # start
        "How many positive divisors does 36 have?",  # duplicate
        "How many positive divisors does 48 have?",  # rouge (6/7 tokens)
        "A train travels 60 miles in 1.5 hours. What is its average speed?",
    ]  # passes
    names = [tf.check(t)[1] for t in texts]
    assert names == ["length", "banned", "start", "duplicate", "rouge", None]
    c = tf.counters()
    assert c["filter/length/rejected"] == 1 and c["filter/length/passed"] == 5
    assert c["filter/banned/rejected"] == 1 and c["filter/banned/passed"] == 4
    assert c["filter/start/rejected"] == 1 and c["filter/start/passed"] == 3
    assert c["filter/duplicate/rejected"] == 1 and c["filter/duplicate/passed"] == 2
    assert c["filter/rouge/rejected"] == 1 and c["filter/rouge/passed"] == 1


def test_sync_indexes_only_new_texts():
    tf = TextFilters()
    known = ["What is 12 times 12 plus 1?"]
    tf.sync(known)
    known.append("Find the remainder of 100 divided by 7.")
    tf.sync(known)
    assert len(tf.novelty.index) == 2 and len(tf.duplicate.keys) == 2


@pytest.mark.parametrize(
    "agreement,kept,reason",
    [
        (0.2, True, None),
        (0.8, True, None),
        (0.5, True, None),
        (3 / 16, False, "too_hard"),
        (13 / 16, False, "too_easy"),
        (0.0, False, "too_hard"),
        (1.0, False, "too_easy"),
    ],
)
def test_difficulty_filter_inclusive_bounds(agreement, kept, reason):
    f = DifficultyFilter(0.2, 0.8)
    assert f.check(agreement) == (kept, reason)


def test_difficulty_counters_and_bad_bounds():
    f = DifficultyFilter(0.25, 0.75)
    for a in (0.0, 0.25, 0.5, 0.75, 1.0, 1.0):
        f.check(a)
    assert f.counters() == {
        "filter/difficulty/kept": 3.0,
        "filter/difficulty/too_easy": 2.0,
        "filter/difficulty/too_hard": 1.0,
    }
    with pytest.raises(ValueError):
        DifficultyFilter(0.9, 0.1)
