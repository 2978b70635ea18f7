"""Few-shot prompts for problem generation, and parsing the numbered list back out.

A prompt is an instruction, k numbered example problems and the next number, so the
model continues the list. In chat format the instruction and examples form the user
turn and the assistant turn is pre-filled with the next number.
"""

from __future__ import annotations

import re

from serl.recipes.serl.instruct.filters import normalize
from serl.shipped import locate, shipped_dir

DEFAULT_TEMPLATE = "self_instruct_fewshot"


class TemplateError(ValueError):
    """A template file that is missing or lacks a placeholder."""


def load_template(name_or_path: str) -> str:
    """Read a template by path, or by name from serl's shipped ``prompts/<name>.txt``."""
    p = locate(name_or_path)
    if not p.is_file():
        try:
            prompts = shipped_dir("prompts")
        except FileNotFoundError as e:
            raise TemplateError(f"template not found: {name_or_path} ({e})") from None
        p = prompts / (name_or_path if name_or_path.endswith(".txt") else name_or_path + ".txt")
        if not p.is_file():
            raise TemplateError(f"template not found: {name_or_path} (looked in {prompts})")
    text = p.read_text(encoding="utf-8")
    for key in ("{examples}", "{next}"):
        if key not in text:
            raise TemplateError(f"{p}: template lacks the placeholder {key}")
    if text.index("{examples}") > text.index("{next}"):
        raise TemplateError(f"{p}: {{examples}} must come before {{next}}")
    return text


def format_examples(examples: list[str]) -> str:
    # One line per example: a multi-line example would blur where items end.
    return "\n".join(f"{i}. {normalize(t)}" for i, t in enumerate(examples, 1))


def build_prompt(template: str, examples: list[str], chat_format: bool = False, tokenizer=None) -> str:
    """Final prompt text for ``examples``; the model should write item ``len(examples)+1``.

    Substitution is plain ``str.replace`` (LaTeX braces in examples are safe), and
    ``{next}`` is filled before the examples go in, so an example cannot inject it.
    This text is for reading; the model is fed ``build_prompt_ids``.
    """
    user, prefill = _fill(template, examples, chat_format)
    if not chat_format:
        return user
    if tokenizer is None:
        raise ValueError("chat_format needs the tokenizer (for its chat template)")
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True
    )
    return chat + prefill


def build_prompt_ids(template: str, examples: list[str], tokenizer, chat_format: bool = False) -> list[int]:
    """``build_prompt``'s prompt as the token ids fed to the model. The examples are seeds
    and generated problems, untrusted text: they stay plain text (``serl.models.chat``), so an
    example holding ``<|im_end|>`` cannot end the turn."""
    from serl.models.chat import chat_ids, text_ids

    user, prefill = _fill(template, examples, chat_format)
    if not chat_format:
        return text_ids(tokenizer, user)
    return chat_ids(tokenizer, [{"role": "user", "content": user}], prefill=prefill)


def _fill(template: str, examples: list[str], chat_format: bool) -> tuple[str, str]:
    """(text, prefill): raw, the whole prompt and ""; chat, the user turn and the reply's start."""
    nxt = str(len(examples) + 1)
    head, tail = template.split("{next}", 1)
    head = head.replace("{examples}", "\x00")
    tail = tail.replace("{next}", nxt)
    block = format_examples(examples)
    if not chat_format:
        return (head + nxt + tail).rstrip("\n ").replace("\x00", block), ""
    return head.rstrip().replace("\x00", block), (nxt + tail).rstrip("\n ")


# A list marker at the start of a line: "10.", "10)", "10:", "**10.**", "Problem 10."
_MARKER = re.compile(
    r"^[ \t]*[*#]*[ \t]*(?:(?:problem|question)[ \t]*)?(\d{1,4})[ \t]*[.):](?=[\s*]|$)[ \t]*\**",
    re.IGNORECASE | re.MULTILINE,
)
# Where a problem ends inside an item: a blank line, or the model starting to solve it.
_ITEM_END = re.compile(
    r"\n[ \t]*\n|^[ \t]*[*#]*[ \t]*(?:solution|answer|hint|explanation)\b", re.IGNORECASE | re.MULTILINE
)


def parse_items(completion: str, first_number: int, finished_by_length: bool = False) -> list[str]:
    """Numbered problems in a completion that continues a list after ``first_number.``.

    The text before the first marker is item ``first_number``. Items are read while
    the numbers go up by one (a restart such as "1. Solution" ends the list). An item
    ends at the next marker, a blank line or a "Solution:"/"Answer:" line. When the
    completion stopped on the length limit, an unterminated last item is dropped.
    """
    starts = [(0, 0)]  # (body start, marker start); item first_number starts at 0
    cut_at_end = len(completion)
    expected = first_number + 1
    for m in _MARKER.finditer(completion):
        if int(m.group(1)) != expected:  # out of sequence: the list is over
            cut_at_end = m.start()
            break
        starts.append((m.end(), m.start()))
        expected += 1
    bodies: list[tuple[str, bool]] = []  # (text, terminated)
    for j, (s, _) in enumerate(starts):
        e = starts[j + 1][1] if j + 1 < len(starts) else cut_at_end
        body = completion[s:e]
        terminated = j + 1 < len(starts) or e < len(completion)
        end = _ITEM_END.search(body)
        if end:
            body, terminated = body[: end.start()], True
        bodies.append((body, terminated))
    items = []
    for j, (body, terminated) in enumerate(bodies):
        last = j == len(bodies) - 1
        if last and finished_by_length and not terminated:
            continue
        text = normalize(body)
        if text:
            items.append(text)
    return items
