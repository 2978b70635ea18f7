import pytest

from serl.recipes.serl.instruct.template import TemplateError, build_prompt, load_template, parse_items


@pytest.mark.parametrize(
    "completion,length,expected",
    [
        # plain continuation: the text before "10." is item 9
        (
            " What is 3+3?\n10. Compute 5 times 7.\n11. How many primes are below 20?\n",
            False,
            ["What is 3+3?", "Compute 5 times 7.", "How many primes are below 20?"],
        ),
        # "11)" and "**12.**" markers, blank lines between items
        (" A?\n\n10) B is it?\n\n**11.** C is it?", False, ["A?", "B is it?", "C is it?"]),
        # cut by the length limit: the unterminated last item is dropped
        (" What is 3+3?\n10. Compute 5 times", True, ["What is 3+3?"]),
        # ... but kept when the model stopped by itself
        (" What is 3+3?\n10. Compute 5 times 7", False, ["What is 3+3?", "Compute 5 times 7"]),
        # ... and kept when a blank line closed it before the cut
        (" What is 3+3?\n10. Compute 5 times 7.\n\nThese problems", True, ["What is 3+3?", "Compute 5 times 7."]),
        # the model starts solving: the item ends at "Solution:", the restart "1." ends the list
        (
            " What is 3+3?\nSolution: 6.\n10. Compute 5 times 7.\n1. Solution: 35",
            False,
            ["What is 3+3?", "Compute 5 times 7."],
        ),
        # numbers must go up by one: "12." after "10." ends the list
        (" A is it?\n10. B is it?\n12. C is it?", False, ["A is it?", "B is it?"]),
        # a decimal at a line start is not a marker
        (" Add these:\n3.5 and 4.25\n10. Next one?", False, ["Add these: 3.5 and 4.25", "Next one?"]),
        # multi-line item is joined with single spaces; LaTeX case kept
        (" Let $F$ be\n a Field.\n10. Q?", False, ["Let $F$ be a Field.", "Q?"]),
        ("", False, []),
        ("\n10. Only this one?", False, ["Only this one?"]),
    ],
)
def test_parse_items(completion, length, expected):
    assert parse_items(completion, 9, finished_by_length=length) == expected


def test_build_prompt_raw_numbers_examples_and_ends_with_next():
    t = load_template("self_instruct_fewshot")
    p = build_prompt(t, ["Find $\\frac{1}{2}$ of {next}.", "What is\n2 + 2?"], chat_format=False)
    lines = p.splitlines()
    assert lines[-3:] == ["1. Find $\\frac{1}{2}$ of {next}.", "2. What is 2 + 2?", "3."]
    assert "{examples}" not in p


class _ChatTok:
    def apply_chat_template(self, msgs, tokenize, add_generation_prompt):
        assert not tokenize and add_generation_prompt and len(msgs) == 1
        return f"<user>{msgs[0]['content']}</user><assistant>"


def test_build_prompt_chat_prefills_next_number():
    t = load_template("self_instruct_fewshot")
    p = build_prompt(t, ["A is it?", "B is it?"], chat_format=True, tokenizer=_ChatTok())
    assert p.startswith("<user>Here is a numbered list")
    assert p.endswith("1. A is it?\n2. B is it?</user><assistant>3.")


@pytest.mark.slow
def test_build_prompt_chat_with_smollm2_template(smol_tokenizer):
    t = load_template("self_instruct_fewshot")
    p = build_prompt(t, ["A is it?", "B is it?"], chat_format=True, tokenizer=smol_tokenizer)
    assert p.endswith("2. B is it?<|im_end|>\n<|im_start|>assistant\n3.")


def test_template_errors(tmp_path):
    bad = tmp_path / "t.txt"
    bad.write_text("no placeholders here")
    with pytest.raises(TemplateError, match="placeholder"):
        load_template(str(bad))
    with pytest.raises(TemplateError, match="not found"):
        load_template("no_such_template")
