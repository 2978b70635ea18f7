import time

import pytest

from serl.recipes.spell.json_extract import extract_json_fields


def extract_qa(text):
    return extract_json_fields(text, ("question", "answer"), numeric=("answer",))


QA = {"question": "Who founded Nuling Works?", "answer": "Suna Graland"}


@pytest.mark.parametrize(
    "text",
    [
        '{"question": "Who founded Nuling Works?", "answer": "Suna Graland"}',
        'Here you go:\n```json\n{"question": "Who founded Nuling Works?", "answer": "Suna Graland"}\n```\nHope it helps.',
        "{'question': 'Who founded Nuling Works?', 'answer': 'Suna Graland'}",
        '{"question": "Who founded Nuling Works?", "answer": "Suna Graland",}',
        "{\u201cquestion\u201d: \u201cWho founded Nuling Works?\u201d, \u201canswer\u201d: \u201cSuna Graland\u201d}",
        '{question: "Who founded Nuling Works?", answer: "Suna Graland"}',
        '{"Question": " Who founded Nuling Works? ", "ANSWER": "Suna Graland "}',
        'Use {x as a name. {"question": "Who founded Nuling Works?", "answer": "Suna Graland"}',
        '{"question": "Q1?", "answer": "A1"} and then {"question": "Who founded Nuling Works?", "answer": "Suna Graland"}',
        '{"question": "Who founded Nuling Works?", "answer": "Suna Graland"} {"question": "no answer"}',
        '<think>{"question": "draft?", "answer": "x"}</think>{"question": "Who founded Nuling Works?", "answer": "Suna Graland"}',
    ],
)
def test_finds_the_block(text):
    assert extract_qa(text) == QA


def test_apostrophe_inside_single_quotes_and_braces_inside_strings():
    assert extract_qa("{'question': 'What is Tobin's job?', 'answer': 'carpenter',}") == {
        "question": "What is Tobin's job?",
        "answer": "carpenter",
    }
    assert extract_qa('{"question": "What is {x} in \\"Brelby\\"?", "answer": "y"}') == {
        "question": 'What is {x} in "Brelby"?',
        "answer": "y",
    }


@pytest.mark.parametrize(
    "text,want",
    [
        (
            '{"question": "Which inn?", "answer": "the "Star" inn",}',
            {"question": "Which inn?", "answer": 'the "Star" inn'},
        ),
        (
            '{"question": "Who is "Red" Varn?", "answer": "a miller"}',
            {"question": 'Who is "Red" Varn?', "answer": "a miller"},
        ),
        (
            '{"question": "Q?", "answer": "a \\"quoted\\" b"}',
            {"question": "Q?", "answer": 'a "quoted" b'},
        ),  # escaped: as is
        ('{"question": "What about "this", then?", "answer": "x"}', None),  # a quote before a comma ends the string
    ],
)
def test_unescaped_inner_quotes(text, want):
    assert extract_qa(text) == want


@pytest.mark.parametrize("answer,expected", [("12", "12"), ("1887.5", "1887.5")])
def test_number_answers_become_strings(answer, expected):
    assert extract_qa('{"question": "How many?", "answer": ' + str(answer) + "}")["answer"] == expected


@pytest.mark.parametrize(
    "text",
    [
        "I could not think of a question.",
        '{"question": "", "answer": "x"}',
        '{"question": "Q?", "answer": ""}',
        '{"question": "Q?", "answer": true}',
        '{"question": "Q?", "answer": null}',
        '{"question": ["Q?"], "answer": "x"}',
        '["question", "answer"]',
        '{"qa": {"question": "Q?", "answer": "x"}}',  # only top-level objects count
        '<think>{"question": "Q?", "answer": "x"} never closed',
        '{"question": "Q?", "answer": "x"',  # unbalanced
        "",
    ],
)
def test_bad_format(text):
    assert extract_qa(text) is None


def test_input_is_bounded():
    block = '{"question": "Q?", "answer": "x"}'
    t = time.perf_counter()
    assert extract_qa("y" * 2_000_000 + block) == {"question": "Q?", "answer": "x"}
    assert extract_qa(block + "y" * 2_000_000) is None  # outside the searched tail
    assert extract_qa("{" * 200_000) is None
    assert extract_qa('{"question": "Q?", "answer": ' + "[" * 5000 + "]" * 5000 + "}") is None
    assert extract_qa('{"a": 1} ' * 5000) is None
    assert time.perf_counter() - t < 2.0


@pytest.mark.parametrize(
    "text,fields,numeric,want",
    [
        ('{"name": "Ann", "age": 41}', ("name",), (), {"name": "Ann"}),
        ('{"name": "Ann", "age": 41}', ("name", "age"), (), None),  # a number where text is wanted
        ('{"name": "Ann", "age": 41}', ("name", "age"), ("age",), {"name": "Ann", "age": "41"}),
        ('{"move": "e4"} then {"move": "d4", "why": "space"}', ("move",), (), {"move": "d4"}),
        ('{"move": "d4", "why": "space"} {"move": "e4"}', ("move", "why"), (), {"move": "d4", "why": "space"}),
    ],
)
def test_any_fields(text, fields, numeric, want):
    assert extract_json_fields(text, fields, numeric) == want
