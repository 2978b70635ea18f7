import pytest

from serl.recipes.spell.episode import parse_questioner
from serl.recipes.spell.judge import parse_judgment
from serl.recipes.spell.memory import MemoryEntry
from serl.recipes.spell.prompts import (
    ANSWER_PHRASE,
    MAX_ANSWER_CHARS,
    QUESTIONER_PREFILL,
    VERIFIER_PREFILL,
    prefill,
    questioner_prompt,
    responder_prompt,
    verifier_prompt,
)
from serl.recipes.spell.qa import extract_final_answer

PARAS = [
    "Nuling Works produces garden tools. It was founded in 1881 by Suna Graland.",
    "The Treith river runs through the town of Brelby. Braces {like this} stay.",
]


@pytest.mark.parametrize("compact", [False, True])
def test_questioner_numbers_paragraphs_and_asks_for_json(compact):
    p = questioner_prompt(PARAS, compact=compact)
    assert f"[1] {PARAS[0]}" in p and f"[2] {PARAS[1]}" in p
    assert '{"question": "...", "answer": "..."}' in p
    assert parse_questioner(p + '\n{"question": "Who founded Nuling Works?", "answer": "Suna Graland"}') == (
        "ok",
        {"question": "Who founded Nuling Works?", "answer": "Suna Graland"},
    )


@pytest.mark.parametrize(
    "mode,compact,want",
    [("auto", True, QUESTIONER_PREFILL), ("auto", False, ""), ("on", False, QUESTIONER_PREFILL), ("off", True, "")],
)
def test_prefill_modes(mode, compact, want):
    assert prefill(QUESTIONER_PREFILL, mode, compact) == want
    assert prefill(VERIFIER_PREFILL, mode, compact) == (VERIFIER_PREFILL if want else "")


@pytest.mark.parametrize(
    "reply,want", [("YES]]", 1), ("no]] because they differ", 0), ("YES] 4 children", -1), ("YES]] or [[NO]]", -1)]
)
def test_verifier_prefill_plus_reply_parses(reply, want):
    assert parse_judgment(VERIFIER_PREFILL + reply) == want


@pytest.mark.parametrize(
    "reply,want",
    [
        (
            'Who founded Nuling Works?", "answer": "Suna Graland"}',
            ("ok", {"question": "Who founded Nuling Works?", "answer": "Suna Graland"}),
        ),
        ('How many staff?", "answer": 120} Anything else?', ("ok", {"question": "How many staff?", "answer": "120"})),
        ("What is Brelby? It is a town.", ("bad_format", None)),  # never closes the block
    ],
)
def test_prefill_plus_reply_parses(reply, want):
    assert parse_questioner(QUESTIONER_PREFILL + reply) == want


def test_compact_prompts_are_shorter():
    hist = [MemoryEntry((0,), "Who founded Nuling Works?", "Suna Graland")]
    assert len(questioner_prompt(PARAS, hist, compact=True)) < len(questioner_prompt(PARAS, hist)) / 2
    assert len(responder_prompt("Q?", PARAS, compact=True)) < len(responder_prompt("Q?", PARAS))
    assert len(verifier_prompt("Q?", "a", "b", compact=True)) < len(verifier_prompt("Q?", "a", "b")) / 2


def test_questioner_needs_paragraphs():
    with pytest.raises(ValueError, match="at least one paragraph"):
        questioner_prompt([])


@pytest.mark.parametrize("compact", [False, True])
def test_responder_with_and_without_documents(compact):
    with_docs = responder_prompt("Who founded Nuling Works?", PARAS, compact=compact)
    assert PARAS[0] in with_docs and "Who founded Nuling Works?" in with_docs and ANSWER_PHRASE in with_docs
    for no_docs in (
        responder_prompt("Who founded Nuling Works?", None, compact=compact),
        responder_prompt("Who founded Nuling Works?", [], compact=compact),
    ):
        assert "Nuling Works produces" not in no_docs and "[1]" not in no_docs
        assert "Who founded Nuling Works?" in no_docs and ANSWER_PHRASE in no_docs
    assert extract_final_answer(f"{ANSWER_PHRASE} Suna Graland.") == "Suna Graland"


@pytest.mark.parametrize("compact", [False, True])
def test_verifier_shows_both_answers_and_the_verdict_format(compact):
    p = verifier_prompt("Who founded Nuling Works?", "It is Suna Graland.", "Suna Graland", compact=compact)
    assert "Answer A: It is Suna Graland." in p and "Answer B: Suna Graland" in p
    assert "[[YES]]" in p and "[[NO]]" in p
    assert parse_judgment(p) == -1  # the prompt itself is not a verdict


def test_model_text_in_prompts_is_clipped():
    long = "word " * 1000
    p = verifier_prompt(long, long, "x")
    assert len(p) < 2 * MAX_ANSWER_CHARS + 600 + 1000
    assert "word word" in p and p.count("word") < 300
    assert len(responder_prompt(long, None)) < 1000
