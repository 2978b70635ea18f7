import json

import pytest

from serl.recipes.spell.memory import HistoryMemory, MemoryEntry
from serl.recipes.spell.prompts import questioner_prompt


@pytest.mark.parametrize(
    "score,stored", [(0.0, False), (0.125, True), (0.5, True), (1.0, True), (1.2, False), (-0.1, False)]
)
def test_stored_only_when_mean_score_in_open_closed_unit_interval(score, stored):
    m = HistoryMemory()
    assert m.add("c", [2, 0], "Q?", "A", score) is stored
    assert len(m) == int(stored)


def test_fifo_capacity_three_per_cluster():
    m = HistoryMemory()
    for i in range(4):
        assert m.add("c", [i], f"Question {i}?", f"A{i}", 0.5)
    m.add("d", [5], "Other?", "X", 0.5)
    assert [e.question for e in m.get("c")] == ["Question 1?", "Question 2?", "Question 3?"]
    assert m.get("c")[0] == MemoryEntry((1,), "Question 1?", "A1")
    assert m.evidence("c") == [1, 2, 3] and m.evidence("nope") == [] and m.get("nope") == []
    assert len(m) == 4
    assert m.fill(n_clusters=4) == pytest.approx(4 / 12)
    assert m.fill(0) == 0.0


def test_duplicate_question_not_stored():
    m = HistoryMemory()
    assert m.add("c", [1], "Who founded  Nuling Works?", "Suna", 0.5)
    assert not m.add("c", [2], "who founded nuling works?", "Suna", 0.5)
    assert m.add("d", [2], "who founded nuling works?", "Suna", 0.5)  # other cluster: fine


def test_evidence_deduplicated_and_sorted():
    m = HistoryMemory(capacity=2)
    m.add("c", [3, 1, 3], "Q?", "A", 1.0)
    assert m.get("c")[0].evidence == (1, 3)


def test_state_dict_round_trips_through_json():
    m = HistoryMemory()
    for i in range(4):
        m.add(f"c{i % 2}", [i, i + 1], f"Q{i}?", f"A{i}", 0.5)
    state = json.loads(json.dumps(m.state_dict()))
    m2 = HistoryMemory(capacity=1)
    m2.load_state_dict(state)
    assert m2.capacity == 3 and m2.state_dict() == m.state_dict()
    assert m2.get("c0") == m.get("c0")
    m2.add("c0", [9], "Q9?", "A9", 0.5)
    m2.add("c0", [9], "Q10?", "A10", 0.5)
    assert [e.question for e in m2.get("c0")] == ["Q2?", "Q9?", "Q10?"]  # FIFO survives loading


def test_capacity_zero_is_no_memory():
    """--memory_capacity 0, the "no history memory" control: nothing is kept, no evidence carried."""
    m = HistoryMemory(capacity=0)
    assert not m.add("c", [1], "Q?", "A", 0.5)
    assert m.get("c") == [] and m.evidence("c") == [] and len(m) == 0 and m.fill(4) == 0.0
    m2 = HistoryMemory()
    m2.load_state_dict(json.loads(json.dumps(m.state_dict())))
    assert m2.capacity == 0 and not m2.add("c", [1], "Q?", "A", 0.5)
    with pytest.raises(ValueError, match=">= 0"):
        HistoryMemory(capacity=-1)


@pytest.mark.parametrize(
    "state,msg",
    [
        ([], "must be a dict"),
        ({"clusters": {"c": [{"question": "Q", "answer": "A"}]}}, "entry 0 lacks"),
        ({"clusters": {"c": [{"evidence": ["1"], "question": "Q", "answer": "A"}]}}, "bad types"),
        ({"capacity": 1, "clusters": {"c": [{"evidence": [], "question": "Q", "answer": "A"}] * 2}}, "at most 1"),
        ({"capacity": -1, "clusters": {}}, "bad capacity"),
    ],
)
def test_bad_state_is_refused(state, msg):
    with pytest.raises(ValueError, match=msg):
        HistoryMemory().load_state_dict(state)


@pytest.mark.parametrize("compact", [False, True])
def test_prompt_shows_previous_examples_and_asks_for_harder(compact):
    m = HistoryMemory()
    m.add("c", [0], "Who founded Nuling Works?", "Suna Graland", 0.5)
    m.add("c", [1], "Which river flows through Brelby?", "Treith", 0.75)
    paras = ["Nuling Works produces garden tools.", "The Treith river runs through Brelby."]
    with_hist = questioner_prompt(paras, m.get("c"), compact=compact)
    assert "Who founded Nuling Works?" in with_hist and "Suna Graland" in with_hist
    assert with_hist.index("Nuling Works?") < with_hist.index("Which river flows")  # oldest first
    assert "harder" in with_hist
    plain = questioner_prompt(paras, m.get("empty"), compact=compact)
    assert "harder" not in plain and "Suna Graland" not in plain
