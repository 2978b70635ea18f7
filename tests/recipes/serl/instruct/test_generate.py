import logging
import random

import pytest

from serl.data.seeds import Problem
from serl.engines.base import Completion
from serl.recipes.serl.instruct import InstructConfig, PromptPool, SelfInstruct

SEEDS = [
    Problem(f"Seed {w}: how many apples does {w} have after buying {i} more?", str(i))
    for i, w in enumerate("Ann Bob Cid Dan Eve Fay Gus Hal Ivy Jon".split())
]


class CharTok:
    """Characters as token ids, so the prompts that arrive as ids decode exactly."""

    def __call__(self, text, add_special_tokens=False, split_special_tokens=False):
        return {"input_ids": [ord(ch) for ch in text]}


class ScriptedGenerator:
    """Returns queued completion texts in order; records the prompts it was given."""

    def __init__(self, texts, finish="stop"):
        self.texts, self.finish, self.prompts, self.calls = list(texts), finish, [], 0

    def generate(self, prompts, n, sampling):
        self.calls += 1
        self.prompts += ["".join(map(chr, p)) for p in prompts]
        out = []
        for _ in prompts:
            text = self.texts.pop(0) if self.texts else ""
            out.append(
                [Completion(text=text, token_ids=[1] * 5, prompt_ids=[], finish_reason=self.finish) for _ in range(n)]
            )
        return out


def _make(tmp_path, texts, **cfg):
    pool = PromptPool.create(tmp_path, SEEDS)
    cfg = InstructConfig(n_shots=4, prompts_per_call=2, **cfg)
    gen = ScriptedGenerator(texts)
    return pool, gen, SelfInstruct(gen, CharTok(), pool, cfg)


def test_propose_filters_and_adds_pending(tmp_path):
    texts = [
        " A train goes 60 miles in 2 hours. What is its speed?\n"
        "6. Draw a circle of radius 3 and shade it in.\n"
        "7. A train goes 60 miles in 2 hours. What is its speed?\n",  # duplicate within batch
        " What is the greatest common divisor of 84 and 36?\n6. Too short now\n",
    ]
    pool, gen, si = _make(tmp_path, texts)
    items, m = si.propose(5, step=3, rng=random.Random(0))
    assert [it.text for it in items] == [
        "A train goes 60 miles in 2 hours. What is its speed?",
        "What is the greatest common divisor of 84 and 36?",
    ]
    assert all(it.status == "pending" and it.step == 3 and it.source == "generated" for it in items)
    assert all(len(it.parents) == 4 and all(p.startswith("s") for p in it.parents) for it in items)
    assert [c.filter for c in si.last_candidates] == [None, "banned", "duplicate", None, "length"]
    assert m["instruct/candidates"] == 5 and m["instruct/accepted"] == 2
    # CharTok: one id per character, so the prefill's tokens are the prompts' characters
    assert m["instruct/prompt_tokens"] == sum(map(len, gen.prompts)) > 0
    assert m["filter/banned/rejected"] == 1 and m["filter/duplicate/rejected"] == 1
    assert m["filter/length/rejected"] == 1 and m["filter/rouge/passed"] == 2
    # the prompt ends with the next number: 4 shots -> "5."
    assert gen.prompts[0].endswith("\n5.") and gen.prompts[0].count("\n1. ") == 1


def test_propose_stops_when_enough_and_marks_surplus(tmp_path):
    texts = [
        " What is 17 plus 25 in total?\n6. How many minutes are in 3 hours?\n7. What is the product of 12 and 11?\n"
    ] * 10
    pool, gen, si = _make(tmp_path, texts)
    items, m = si.propose(2, step=1, rng=random.Random(0))
    assert len(items) == 2 and gen.calls == 1
    assert [c.filter for c in si.last_candidates][:3] == [None, None, "surplus"]
    assert m["instruct/candidates"] == 2  # surplus items are not run through the filters
    assert [c.filter for c in si.last_candidates].count("surplus") == 1 + 3  # 2nd prompt too
    assert pool.stats()["pool/pending"] == 2


def test_propose_bounded_attempts_logs_shortfall(tmp_path, caplog):
    pool, gen, si = _make(tmp_path, [], max_attempts=3)
    with caplog.at_level(logging.WARNING, logger="serl.recipes.serl.instruct.generate"):
        items, m = si.propose(4, step=2, rng=random.Random(0))
    assert items == [] and gen.calls == 3 and m["instruct/attempts"] == 3
    assert "only 0 of 4 problems passed" in caplog.text


def test_novelty_compares_with_seeds_and_earlier_steps(tmp_path):
    texts = [" " + SEEDS[0].text.replace("apples", "pears") + "\n", " What is the least common multiple of 8 and 12?\n"]
    pool, gen, si = _make(tmp_path, texts)
    items, _ = si.propose(5, step=1, rng=random.Random(0))
    assert [c.filter for c in si.last_candidates] == ["rouge", None]
    gen.texts = [" what is the least  common multiple of 8 and 12?\n"]  # case, spaces
    si.propose(1, step=2, rng=random.Random(1))
    assert [c.filter for c in si.last_candidates] == ["duplicate"]


DISTINCT = [
    "A baker sells 14 loaves each morning. How many loaves are sold in a week?",
    "Tom reads 12 pages daily; the novel has 180 pages. After how many days is he done?",
    "Three friends split a bill of 57 dollars equally. What does each person pay?",
    "A rectangle measures 9 cm by 4 cm. Find its perimeter in centimetres.",
    "Maria saved 35 coins, then spent 17 of them on stickers. How many coins remain?",
    "Eight buses carry 42 pupils apiece to the museum. Count every pupil on board.",
    "Water fills a tank at 6 litres per minute. How long until 90 litres are in it?",
    "Jake owns twice as many marbles as Lee, who owns 23. How many marbles does Jake own?",
]


def _texts(k):  # k completions of one distinct problem each
    return [" " + DISTINCT[i] + "\n" for i in range(k)]


def test_one_call_sends_the_same_prompts_in_one_call(tmp_path):
    # fixed calls: 2 prompts a call, one problem each, 4 wanted -> 2 calls of 2
    _, fixed, si = _make(tmp_path / "a", _texts(8))
    items, m = si.propose(4, step=1, rng=random.Random(7))
    assert fixed.calls == 2 and len(items) == 4 and m["instruct/attempts"] == 2
    # one_call, no history: ceil(1.25 * 4 / 1) = 5 prompts in one call; the first four are
    # the prompts the fixed calls sent (same rng, same pool), the fifth gives a surplus problem
    _, gen, si1 = _make(tmp_path / "b", _texts(8), one_call=True)
    items1, m1 = si1.propose(4, step=1, rng=random.Random(7))
    assert gen.calls == 1 and len(gen.prompts) == 5 and m1["instruct/attempts"] == 1
    assert gen.prompts[:4] == fixed.prompts
    assert [it.text for it in items1] == [it.text for it in items]
    assert [c.filter for c in si1.last_candidates] == [None] * 4 + ["surplus"]
    assert (si1.prompts_sent, si1.problems_accepted) == (5, 4)


@pytest.mark.parametrize(
    "sent, accepted, need, budget, size",
    [
        (0, 0, 8, 16, 10),  # no history: one prompt per problem, and a quarter more
        (10, 20, 8, 16, 5),  # two problems per prompt: ceil(1.25 * 8 / 2)
        (40, 10, 8, 16, 16),  # a quarter of a problem per prompt: 40 wanted, capped by the budget
        (10, 0, 3, 16, 4),  # nothing accepted yet: the prior of one per prompt
        (8, 8, 1, 16, 2),
    ],
)
def test_one_call_size(tmp_path, sent, accepted, need, budget, size):
    _, _, si = _make(tmp_path, [], one_call=True)
    si.prompts_sent, si.problems_accepted = sent, accepted
    assert si.call_size(need, budget) == size


def test_one_call_falls_back_to_more_calls_and_keeps_the_budget(tmp_path):
    # every completion empty: calls go on until max_attempts or the prompt budget (2 x 3 = 6)
    _, gen, si = _make(tmp_path, [], one_call=True, max_attempts=3)
    items, m = si.propose(4, step=1, rng=random.Random(0))
    assert items == [] and len(gen.prompts) == 6 and gen.calls == 1 + 1  # 5 prompts, then the last 1


def test_yield_counters_survive_a_state_round_trip(tmp_path):
    _, _, si = _make(tmp_path / "a", _texts(6), one_call=True)
    si.propose(3, step=1, rng=random.Random(0))
    _, _, other = _make(tmp_path / "b", [], one_call=True)
    other.load_state_dict(si.state_dict())
    assert (other.prompts_sent, other.problems_accepted) == (si.prompts_sent, si.problems_accepted) == (4, 3)
