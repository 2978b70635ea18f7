"""``serl probe`` (serl.eval.probe): the precondition's numbers worked out by hand, its plain
verdicts, and one tiny run of the real embedded model on the shipped arithmetic seeds."""

import json
from pathlib import Path

import pytest

from serl.engines.base import Completion
from serl.eval.probe import Item, measure, summarize, two_sided_p, verdict

ROOT = Path(__file__).resolve().parents[2]


class ByPosition:
    """Greedy texts and sampled texts by the prompt's position in the call."""

    def __init__(self, greedy, samples, cut=()):
        self.greedy, self.samples, self.cut = greedy, samples, set(cut)  # cut: texts that ran into the limit

    def generate(self, prompts, n, sampling):
        texts = [[g] for g in self.greedy] if sampling.greedy else self.samples
        assert len(prompts) == len(texts) and all(len(t) == n for t in texts)
        return [
            [
                Completion(text=t, token_ids=[1], prompt_ids=[0], finish_reason="length" if t in self.cut else "stop")
                for t in group
            ]
            for group in texts
        ]


def test_measure_and_summarize_by_hand(smol_tokenizer, checker):
    problems = [("q0", "3"), ("q1", "6"), ("q2", "7"), ("q3", None)]
    box = "\\boxed{{{}}}".format
    gen = ByPosition(
        [box(3), box(5), box(7), box(1)],
        [
            [box(3), box(3), box(3), box(4)],  # vote 3 (3 of 4: clear), right; greedy right
            [box(6), box(6), box(5), box(2)],  # vote 6 (2 of 4: not clear), right; greedy 5 wrong
            [box(8)] * 4,  # vote 8 (4 of 4), wrong; greedy right
            ["no idea"] * 4,
        ],
    )  # no answer at all; no label
    items = measure(
        gen,
        smol_tokenizer,
        problems,
        k=4,
        checker=checker,
        max_new_tokens=8,
        temperature=1.0,
        top_p=1.0,
        instruction="Box it.",
        fallback="none",
        seed=0,
    )
    assert [(it.vote, it.share, it.greedy_is_vote, it.greedy_ok, it.vote_ok) for it in items] == [
        ("3", 0.75, True, True, True),
        ("6", 0.5, False, False, True),
        ("8", 1.0, False, True, False),
        (None, 0.0, False, None, None),
    ]
    s = summarize(items, 4)
    assert s["problems"] == 4 and s["labelled"] == 3
    assert s["mean_majority_share"] == pytest.approx((0.75 + 0.5 + 1.0 + 0.0) / 4)
    assert s["clear_majority_share"] == 0.5  # q0 and q2
    assert s["no_vote_share"] == 0.25 and s["greedy_is_vote_share"] == 0.25
    assert s["greedy_acc"] == pytest.approx(2 / 3) and s["maj@4_acc"] == pytest.approx(2 / 3)
    assert (s["vote_only_right"], s["greedy_only_right"], s["mcnemar_p"]) == (1, 1, 1.0)
    assert s["vote_acc_clear"] == 0.5 and s["vote_acc_unclear"] == 1.0
    assert verdict(s).startswith("the vote is right exactly as often as greedy")


def test_cut_answers_and_the_lead_where_greedy_finished(smol_tokenizer, checker):
    """Four problems; greedy is cut on two (both wrong, the vote right on both). The vote leads by
    +25 points overall, but where greedy finished it trails by 50 (right on 1 of 2, greedy on 2):
    its whole lead is about stopping."""
    problems = [("q0", "3"), ("q1", "6"), ("q2", "7"), ("q3", "2")]
    box = "\\boxed{{{}}}".format
    gen = ByPosition(
        ["Let me think about", "First we add", box(7), box(2)],
        [
            [box(3), box(3), box(3), "The answer is"],  # vote 3 right; greedy cut
            [box(6), box(6), "So", "Hence"],  # vote 6 right (2 of 4 boxed agree); greedy cut
            [box(8), box(8), box(8), box(7)],  # vote 8 wrong; greedy 7 right
            [box(1), box(2), box(2), box(2)],  # vote 2 right; greedy right
        ],
        cut={"Let me think about", "First we add", "The answer is", "So", "Hence"},
    )
    items = measure(
        gen,
        smol_tokenizer,
        problems,
        k=4,
        checker=checker,
        max_new_tokens=8,
        temperature=1.0,
        top_p=1.0,
        instruction="Box it.",
        fallback="none",
        seed=0,
        keep_texts=True,
    )
    assert [(it.greedy_cut, it.samples_cut) for it in items] == [(True, 0.25), (True, 0.5), (False, 0.0), (False, 0.0)]
    assert items[0].texts == ["Let me think about", box(3), box(3), box(3), "The answer is"]
    s = summarize(items, 4)
    assert s["greedy_cut_share"] == 0.5 and s["sample_cut_share"] == pytest.approx((0.25 + 0.5) / 4)
    assert s["greedy_acc"] == 0.5 and s["maj@4_acc"] == 0.75 and s["vote_minus_greedy"] == 0.25
    assert s["greedy_finished"] == 2
    assert (s["greedy_acc_finished"], s["maj@4_acc_finished"], s["vote_minus_greedy_finished"]) == (1.0, 0.5, -0.5)
    assert "where it finished (2) the vote leads by -50.0 points, so part of the lead is about stopping" in verdict(s)
    s |= {"vote_minus_greedy_finished": 0.3}  # more than the overall lead: none of it is about stopping
    assert "by +30.0 points, so the lead is about being right" in verdict(s)


def test_two_sided_p_by_hand():
    assert two_sided_p(0, 0) == 1.0
    assert two_sided_p(8, 1) == pytest.approx(2 * (9 + 1) / 512)  # 2 P(X >= 8 | 9)
    assert two_sided_p(1, 8) == two_sided_p(8, 1)
    assert two_sided_p(3, 3) == 1.0


def items(greedy_ok, vote_ok, share=0.75):
    return [Item("1", "1", share, False, True, g, v) for g, v in zip(greedy_ok, vote_ok)]


def test_verdicts():
    # the vote loses: 4 of 10 against greedy's 6 (greedy alone right on 3, the vote alone on 1)
    s = summarize(items([1, 1, 1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 1, 0, 0, 0]), 8)
    assert (s["maj@8_acc"], s["greedy_acc"], s["vote_only_right"], s["greedy_only_right"]) == (0.4, 0.6, 1, 3)
    assert "Label-free training cannot help this model on this data" in verdict(s)
    assert "label more seeds to confirm" in verdict(s)  # 1 against 3: p = 0.625
    # the vote wins clearly: 9 gained, 0 lost of 20 (p = 2^-8)
    s = summarize(items([0] * 9 + [1] * 5 + [0] * 6, [1] * 9 + [1] * 5 + [0] * 6), 8)
    assert s["mcnemar_p"] == pytest.approx(2 / 512) and s["vote_minus_greedy"] == pytest.approx(0.45)
    assert verdict(s).startswith("the vote beats greedy by +45.0 points") and "label more seeds" not in verdict(s)
    assert "precondition holds" in verdict(s)
    # wins by one problem: within the noise
    s = summarize(items([0, 1, 1], [1, 1, 1]), 8)
    assert "label more seeds" in verdict(s)
    # no labels: agreement statistics alone
    s = summarize(items([None] * 4, [None] * 4, share=0.5), 8)
    assert s["labelled"] == 0 and "greedy_acc" not in s
    assert verdict(s).startswith("no labels") and "50%" in verdict(s)


def test_the_command_is_listed():
    from serl.cli import COMMANDS, usage

    assert COMMANDS["probe"][0] == "serl.eval.probe" and "info" in COMMANDS
    assert "probe" in usage()


@pytest.mark.slow
def test_real_model_on_the_arithmetic_seeds(tmp_path, smol_path):
    """The embedded SmolLM2, 8 arithmetic seeds x 4 samples of 64 tokens (fp32 on a CPU without bf16)."""
    from serl.eval.probe import cli_main

    out = tmp_path / "probe.json"
    assert (
        cli_main(
            [
                "--model",
                smol_path,
                "--prompt_data",
                str(ROOT / "dataset/arith_seed.jsonl"),
                "--n",
                "8",
                "--k",
                "4",
                "--generate_max_len",
                "64",
                "--generator",
                "hf",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    got = json.loads(out.read_text())
    s = got["summary"]
    assert s["problems"] == 8 and s["labelled"] == 8 and len(got["items"]) == 8
    assert 0.0 <= s["greedy_acc"] <= 1.0 and 0.25 <= s["mean_majority_share"] <= 1.0 or s["no_vote_share"] > 0
    assert s["verdict"]
