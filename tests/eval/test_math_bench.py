"""evaluate_math on scripted answers: every number below is worked out by hand."""

import json
from collections import Counter

import pytest

from serl.eval.cli import build_parser, run
from serl.eval.data import MathProblem
from serl.eval.math_bench import BOXED_INSTRUCTION, build_prompt, evaluate_math
from serl.rewards import extract_answer

CHOICE_Q = "Which? Answer Choices: (A) 1 (B) 2"
TOY = [  # question, gold, level, subject, greedy text, 4 samples
    (
        "half of one?",
        r"\frac{1}{2}",
        "1",
        "A",
        r"so \boxed{0.5}",
        [r"\boxed{1/2}", r"\boxed{3}", r"\boxed{0.5}", "no idea"],
    ),  # maj 1/2~0.5 right
    ("three plus four?", "7", "2", "A", "the answer is 8", ["7", "8", "8", "7 then 9"]),  # maj 8 wrong, pass yes
    (
        CHOICE_Q,
        "A",
        None,
        "B",
        "The answer is (A)",
        ["answer is (B)", r"\boxed{A}", "(B)", "(A)"],
    ),  # tie B/A: B came first
    ("ten?", "10", None, None, "nothing", ["I don't know"] * 4),  # no answers at all
]


def toy_problems():
    return [
        MathProblem("toy", i, q, gold, choice=(q == CHOICE_Q), level=lv, subject=sj)
        for i, (q, gold, lv, sj, _, _) in enumerate(TOY)
    ]


def toy_generator(scripted, tok):
    """Answers keyed by question; the raw prompts arrive as ids, decoded with ``tok``."""
    return scripted({q: g for q, *_, g, _ in TOY}, {q: s for q, *_, s in TOY}, tokenizer=tok)


def test_metrics_by_hand(scripted, checker, smol_tokenizer):
    gen = toy_generator(scripted, smol_tokenizer)
    out = evaluate_math(gen, smol_tokenizer, toy_problems(), k=4, checker=checker, prompt_style="raw")
    m = out["metrics"]
    assert m["eval/toy/pass@1"] == pytest.approx(2 / 4)
    assert m["eval/toy/maj@4"] == pytest.approx(1 / 4)
    assert m["eval/toy/pass@4"] == pytest.approx(3 / 4)
    assert m["eval/toy/mean@4"] == pytest.approx((2 / 4 + 1 / 4 + 2 / 4 + 0) / 4)
    bench = out["benchmarks"]["toy"]
    assert bench["no_answer@greedy"] == pytest.approx(1 / 4)
    assert bench["by_level"]["1"] == {"n": 1, "pass@1": 1.0, "maj@4": 1.0, "pass@4": 1.0, "mean@4": 0.5}
    assert bench["by_level"]["2"]["maj@4"] == 0.0 and set(bench["by_level"]) == {"1", "2"}
    assert bench["by_subject"]["A"]["pass@1"] == 0.5 and bench["by_subject"]["B"]["maj@4"] == 0.0
    # per problem, for paired comparisons of two evaluations
    assert out["items"]["eval/toy/pass@1"] == {"ids": [0, 1, 2, 3], "values": [1.0, 0.0, 1.0, 0.0]}
    assert out["items"]["eval/toy/maj@4"]["values"] == [1.0, 0.0, 0.0, 0.0]
    recs = out["records"]
    assert len(recs) == 4 + 16
    samples0 = [r for r in recs if r["kind"] == "sample" and r["idx"] == 0]
    assert [r["answer"] for r in samples0] == ["1/2", "3", "0.5", None]
    assert [r["correct"] for r in samples0] == [True, False, True, False]
    assert [r["in_majority"] for r in samples0] == [True, False, True, False]
    # sampling settings reached the generator: greedy pass then K samples with stop for raw prompts
    (_, n1, s1), (_, n2, s2) = gen.calls
    assert (n1, s1.greedy, n2, s2.temperature, s2.top_p, s2.stop) == (1, True, 4, 1.0, 0.95, ("\n\n\n",))


@pytest.mark.parametrize(
    "greedy,k,keys",
    [
        (True, 0, {"pass@1"}),
        (False, 2, {"maj@2", "pass@2", "mean@2"}),
    ],
)
def test_passes_can_be_skipped(scripted, checker, greedy, k, keys, smol_tokenizer):
    out = evaluate_math(
        toy_generator(scripted, smol_tokenizer),
        smol_tokenizer,
        toy_problems(),
        k=k,
        greedy=greedy,
        checker=checker,
        prompt_style="raw",
        prefix="ev",
    )
    assert set(out["metrics"]) == {f"ev/toy/{key}" for key in keys}


def test_prompt_styles(smol_tokenizer):
    q = "What is 2+3?"
    assert build_prompt(q, smol_tokenizer, "raw") == q
    chat = build_prompt(q, smol_tokenizer, "chat")
    boxed = build_prompt(q, smol_tokenizer, "chat_boxed")
    assert chat.rstrip().endswith("<|im_start|>assistant") and q in chat and BOXED_INSTRUCTION not in chat
    assert BOXED_INSTRUCTION in boxed and boxed.rstrip().endswith("<|im_start|>assistant")
    short = build_prompt(q, smol_tokenizer, "chat_boxed", "Answer briefly in \\boxed{}.")
    assert f"{q}\nAnswer briefly in \\boxed{{}}." in short and BOXED_INSTRUCTION not in short
    with pytest.raises(ValueError):
        build_prompt(q, smol_tokenizer, "fancy")


def independent_maj(rows, k):
    """maj@k from a generations file, in a few lines: most common extracted answer
    (earliest first on ties), right if that sample's verdict is right."""
    groups = {}
    for r in rows:
        if r["kind"] == "sample":
            groups.setdefault((r["benchmark"], r["idx"]), []).append(r)
    right = 0
    for g in groups.values():
        assert len(g) == k
        counts = Counter(r["answer"] for r in g if r["answer"] is not None)
        if counts:
            top = max(counts.values())
            winner = next(r for r in g if counts.get(r["answer"]) == top)
            right += winner["correct"]
    return right / len(groups)


def test_cli_run_writes_files_and_cross_check(tmp_path, scripted, checker, smol_tokenizer):
    (tmp_path / "data" / "toy").mkdir(parents=True)
    rows = [
        {"question": q, "answer": f"\\boxed{{{gold}}}", "level": lv, "subject": sj} for q, gold, lv, sj, _, _ in TOY
    ]
    rows[2]["options"] = ["A) 1", "B) 2"]
    (tmp_path / "data" / "toy" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = build_parser().parse_args(
        [
            "--benchmarks",
            "toy",
            "--data_dir",
            str(tmp_path / "data"),
            "--k",
            "4",
            "--prompt_style",
            "raw",
            "--output_dir",
            str(tmp_path / "out"),
            "--quiet",
        ]
    )
    results = run(args, generator=toy_generator(scripted, smol_tokenizer), tokenizer=smol_tokenizer)
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["metrics"] == results["metrics"]
    gens = [json.loads(line) for line in (tmp_path / "out" / "generations.jsonl").read_text().splitlines()]
    assert independent_maj(gens, 4) == saved["benchmarks"]["toy"]["maj@4"] == 0.25
    # the extracted answers in the file are what extract_answer gives on the saved responses
    assert all(r["answer"] == extract_answer(r["response"], "choice" if r["idx"] == 2 else "number") for r in gens)


def test_fallback_none_drops_unboxed_answers(scripted, checker, smol_tokenizer):
    out = evaluate_math(
        toy_generator(scripted, smol_tokenizer),
        smol_tokenizer,
        toy_problems(),
        k=4,
        checker=checker,
        prompt_style="raw",
        fallback="none",
    )
    bench = out["benchmarks"]["toy"]
    # problem 1 had only unboxed numbers: now no answer, so its pass@4 is lost
    assert (bench["pass@1"], bench["maj@4"], bench["pass@4"]) == (0.5, 0.25, 0.5)
    assert bench["no_answer@greedy"] == 0.5
    with pytest.raises(ValueError):
        evaluate_math(
            toy_generator(scripted, smol_tokenizer), smol_tokenizer, toy_problems(), checker=checker, fallback="choice"
        )
