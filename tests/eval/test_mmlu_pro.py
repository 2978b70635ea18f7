"""MMLU-Pro: extraction, stratified picking, shot budget, group weighting (by hand)."""

import pytest

from serl.eval.data import MMLUQuestion, load_mmlu_pro
from serl.eval.mmlu_pro import (
    build_prompt,
    evaluate_mmlu_pro,
    extract_choice,
    extract_choice_rule,
    group_of,
    stratified,
)


@pytest.mark.parametrize(
    "text,letter",
    [
        ("so the answer is (C).", "C"),
        ("the answer is (C). No wait, the answer is (D).", "D"),  # last statement wins
        ("the answer is C", "C"),
        ("the answer is (A) ... Answer: B", "A"),  # "answer is" outranks "Answer:"
        ("Answer: (G)", "G"),
        ("I would pick E here", "E"),  # last standalone letter (I, then E)
        ("options B or maybe F.", "F"),
        ("no capital letters here", None),
        ("ABC is a triangle", None),  # letters inside words do not count
        ("", None),
    ],
)
def test_extract_choice(text, letter):
    assert extract_choice(text) == letter


@pytest.mark.parametrize(
    "text,letter,rule",
    [
        ("so the answer is (C).", "C", "answer_is"),
        ("Answer: (G)", "G", "answer_colon"),
        ("A careful look gives nothing.", "A", "fallback"),  # the article "A"
        ("I am not sure.", "I", "fallback"),  # the pronoun "I"
        ("no capital letters here", None, None),
    ],
)
def test_extract_choice_rule_and_strict(text, letter, rule):
    assert extract_choice_rule(text) == (letter, rule)
    assert extract_choice(text, strict=True) == (None if rule == "fallback" else letter)


def q(qid, cat, answer="A", n_opts=4):
    return MMLUQuestion(qid, f"question {qid}?", [f"opt{i}" for i in range(n_opts)], answer, cat)


def test_stratified_spreads_and_tops_up():
    pool = [q(0, "a")] + [q(10 + i, "b") for i in range(10)] + [q(30 + i, "c") for i in range(10)]
    picked = stratified(pool, 9)
    # 3 each wanted; "a" has 1, so its 2 spare go to "b" then "c"
    assert [x.category for x in picked] == ["a"] + ["b"] * 4 + ["c"] * 4
    # evenly spaced inside a category: (2i+1)*10 // 8 for i < 4
    assert [x.question_id for x in picked if x.category == "b"] == [11, 13, 16, 18]
    assert stratified(pool, 9) == picked  # deterministic


def test_stratified_real_280(mmlu_dir):
    test = load_mmlu_pro(mmlu_dir / "test.jsonl")
    picked = stratified(test, 280)
    counts = {}
    for x in picked:
        counts[x.category] = counts.get(x.category, 0) + 1
    assert len(counts) == 14 and set(counts.values()) == {20}
    assert len({x.question_id for x in picked}) == 280


@pytest.mark.parametrize(
    "category,group",
    [("math", "STEM"), ("computer science", "STEM"), ("law", "Humanities"), ("health", "Social"), ("other", "Other")],
)
def test_groups(category, group):
    assert group_of(category) == group


def test_shots_dropped_to_fit_budget(mmlu_dir, smol_tokenizer):
    val = load_mmlu_pro(mmlu_dir / "validation.jsonl")
    shots = [x for x in val if x.category == "math"]
    target = q(1, "math")
    ids, used, n_full = build_prompt(target, shots, smol_tokenizer, "raw")
    full = smol_tokenizer.decode(ids)  # the prompt comes as the token ids fed to the model
    assert used == 5 and n_full == len(ids) and full.count("Question:") == 6
    assert full.endswith("Answer: Let's think step by step.")
    assert "Answer: Let's think step by step." in full.split("Question:")[1]  # shot's "A:" rewritten
    _, used2, n2 = build_prompt(target, shots, smol_tokenizer, "raw", max_prompt_tokens=n_full - 1)
    assert used2 < 5 and n2 <= n_full - 1
    chat, _, _ = build_prompt(target, shots[:1], smol_tokenizer, "chat")
    assert smol_tokenizer.decode(chat).rstrip().endswith("<|im_start|>assistant")


def test_accuracy_weighted_by_counts(scripted, checker, smol_tokenizer):
    qs = [q(1, "math", "A"), q(2, "math", "B"), q(3, "physics", "C"), q(4, "law", "D"), q(5, "law", "A")]
    texts = ["the answer is (A)", "the answer is (C)", "Answer: C", "hmm", "the answer is (A)"]
    built = [tuple(build_prompt(x, [], smol_tokenizer, "chat")[0]) for x in qs]  # ids, as fed
    samples = [["(A)", "(B)", "(A)"], ["(B)", "(C)", "(C)"], ["C", "C", "D"], ["x", "y", "z"], ["(B)", "(A)", "(B)"]]
    gen = scripted(dict(zip(built, texts)), dict(zip(built, samples)))
    out = evaluate_mmlu_pro(gen, smol_tokenizer, qs, [], k=3, checker=checker, prompt_style="chat")
    e = out["benchmarks"]["mmlu_pro"]
    assert e["pass@1"] == pytest.approx(3 / 5)
    # STEM: math 1/2 and physics 1/1 -> 2/3 over questions (not the 0.75 mean of categories)
    assert e["by_group"]["STEM"]["pass@1"] == pytest.approx(2 / 3)
    assert e["by_group"]["Humanities"] == {
        "n": 2,
        "pass@1": 0.5,
        "maj@3": 0.0,
        "pass@3": 0.5,
        "mean@3": pytest.approx(1 / 6),
        "strict_pass@1": 0.5,
        "fallback@1": 0.0,
        "strict_mean@3": 0.0,
        "fallback@3": 0.5,
    }  # q5's bare "(B)", "(A)", "(B)"
    assert e["by_category"]["math"]["maj@3"] == 0.5  # A right; C (2 of 3) wrong
    assert e["maj@3"] == pytest.approx(2 / 5)  # q1 A, q3 C
    assert out["metrics"]["eval/mmlu_pro/pass@3"] == pytest.approx(4 / 5)
    assert "Social" not in e["by_group"]


def test_prompt_over_budget_counts_wrong(scripted, checker, smol_tokenizer):
    gen = scripted({}, {})
    out = evaluate_mmlu_pro(gen, smol_tokenizer, [q(1, "math")], [], k=0, checker=checker, max_prompt_tokens=5)
    e = out["benchmarks"]["mmlu_pro"]
    assert (e["pass@1"], e["skipped_prompt_too_long"]) == (0.0, 1)
    assert out["records"][0]["finish_reason"] == "prompt_too_long" and gen.calls == []


def test_strict_accuracy_and_fallback_share(scripted, checker, smol_tokenizer):
    """The official protocol counts stray "A"/"I" letters; strict does not (worked out by hand)."""
    qs = [q(1, "math", "A"), q(2, "math", "B"), q(3, "law", "C"), q(4, "law", "D")]
    texts = [
        "A careful look gives nothing.",  # fallback "A": right by luck
        "the answer is (B)",  # explicit, right
        "I am not sure.",  # fallback "I": wrong
        "Answer: D",
    ]  # explicit, right
    samples = [["the answer is (A)", "A"], ["I", "Answer: B"], ["x", "y"], ["C", "D"]]
    built = [tuple(build_prompt(x, [], smol_tokenizer, "chat")[0]) for x in qs]  # ids, as fed
    gen = scripted(dict(zip(built, texts)), dict(zip(built, samples)))
    out = evaluate_mmlu_pro(gen, smol_tokenizer, qs, [], k=2, checker=checker, prompt_style="chat")
    e = out["benchmarks"]["mmlu_pro"]
    assert (e["pass@1"], e["strict_pass@1"], e["fallback@1"]) == (3 / 4, 2 / 4, 2 / 4)
    # samples: right (A, A) (B) () (D) -> mean 2/4; explicit and right: q1 one, q2 one -> 1/4;
    # decided by the fallback: q1 1/2, q2 1/2, q3 0, q4 2/2 -> 2/4
    assert (e["mean@2"], e["strict_mean@2"], e["fallback@2"]) == (0.5, 0.25, 0.5)
    assert out["metrics"]["eval/mmlu_pro/strict_pass@1"] == 0.5
    assert e["by_category"]["law"]["strict_pass@1"] == 0.5 and e["by_category"]["law"]["fallback@1"] == 0.5
    greedy = [r for r in out["records"] if r["kind"] == "greedy"]
    assert [r["extracted_by"] for r in greedy] == ["fallback", "answer_is", "fallback", "answer_colon"]
