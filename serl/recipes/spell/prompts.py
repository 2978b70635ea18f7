"""Prompts for SPELL's three roles, in our own words, full and compact.

The roles are those of SPELL (Tongyi-Zhiwen 2025): the questioner writes a question
with its answer from a few paragraphs (and, with history, sees earlier questions and
is asked for a new, harder one); the responder answers from all paragraphs of the
cluster, or from none for the grounding check; the verifier says whether two answers
agree and ends with ``[[YES]]`` or ``[[NO]]``.

``compact=True`` gives short prompts for models under about 1B parameters: fewer
instructions, the format request last, nothing a small model tends to copy back.
Each builder returns the user message text; the caller applies the chat template.
Model-written text put into a prompt (questions, answers) is cut to a fixed length,
so one runaway generation cannot blow up the next prompt.
"""

from __future__ import annotations

from collections.abc import Sequence

from serl.recipes.spell.memory import MemoryEntry

ANSWER_PHRASE = "The answer is"
# The bootstrap for small models (--questioner_prefill): the questioner's reply starts with
# this text, so the model only continues the JSON block; the parser reads prefill + reply.
QUESTIONER_PREFILL = '{"question": "'


# The same for the verifier (--verifier_prefill): a reply that starts "[[" goes on with the
# verdict. SmolLM2-135M at greedy wrote no verdict in 60 of 60 probe items without it and
# one in 47 of 60 with it (experiments/spell/README.md).
VERIFIER_PREFILL = "[["


def prefill(text: str, mode: str, compact: bool) -> str:
    """``text`` (one of the prefills above) for ``--*_prefill`` auto (on with compact prompts), on or off."""
    return text if mode == "on" or (mode == "auto" and compact) else ""


MAX_QUESTION_CHARS = 600
MAX_ANSWER_CHARS = 300


def _clip(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit].rstrip() + " ..."


def _documents(paragraphs: Sequence[str]) -> str:
    return "\n\n".join(f"[{i}] {p}" for i, p in enumerate(paragraphs, 1))


def _examples(history: Sequence[MemoryEntry], compact: bool) -> str:
    if compact:
        return "\n".join(
            f"- Q: {_clip(e.question, MAX_QUESTION_CHARS)} A: {_clip(e.answer, MAX_ANSWER_CHARS)}" for e in history
        )
    return "\n\n".join(
        f"Example {k}\nQuestion: {_clip(e.question, MAX_QUESTION_CHARS)}\nAnswer: {_clip(e.answer, MAX_ANSWER_CHARS)}"
        for k, e in enumerate(history, 1)
    )


_QUESTIONER_FULL = """You write test questions about documents for a reading exam.

Read the documents between <documents> and </documents>. Write ONE question that
- can be answered only by reading these documents, not from general knowledge;
- has one short, exact answer: a name, a number or a few words taken from the documents;
- preferably links facts from two or more documents (for example, a fact about a person named in another document);
- stands on its own: do not refer to "document 1" or "the text".
{history}
<documents>
{documents}
</documents>

You may think first. Then end your reply with the question and its answer as a JSON block:
```json
{{"question": "...", "answer": "..."}}
```"""

_QUESTIONER_HISTORY_FULL = """
Questions already written about these documents:

{examples}

Write a NEW question that differs from all of these and is harder: it should need more
steps of reasoning or facts from more of the documents.
"""

_QUESTIONER_COMPACT = """Documents:
{documents}
{history}
Write one question about the documents above and its short answer (a name, number or few words).
Reply with JSON only: {{"question": "...", "answer": "..."}}"""

_QUESTIONER_HISTORY_COMPACT = """
Earlier questions:
{examples}
Ask a different, harder question.
"""


# The optional bootstrap for models that do not yet write the JSON block: one worked
# example about a text outside the corpus (no entity of the generated corpus is named).
FEW_SHOT_EXAMPLE = """Example.
Documents:
[1] The lighthouse at Cape Dunmore was built in 1874. It is 31 metres tall.
Reply: {"question": "How tall is the lighthouse at Cape Dunmore?", "answer": "31 metres"}

Now your turn.
"""


def questioner_prompt(
    paragraphs: Sequence[str], history: Sequence[MemoryEntry] = (), compact: bool = False, few_shot: bool = False
) -> str:
    """The questioner sees ``paragraphs`` and, when given, earlier questions as examples;
    ``few_shot`` puts one worked example (:data:`FEW_SHOT_EXAMPLE`) first."""
    if not paragraphs:
        raise ValueError("the questioner needs at least one paragraph")
    lead = FEW_SHOT_EXAMPLE if few_shot else ""
    if compact:
        hist = _QUESTIONER_HISTORY_COMPACT.format(examples=_examples(history, True)) if history else ""
        return lead + _QUESTIONER_COMPACT.format(documents=_documents(paragraphs), history=hist)
    hist = _QUESTIONER_HISTORY_FULL.format(examples=_examples(history, False)) if history else ""
    return lead + _QUESTIONER_FULL.format(documents=_documents(paragraphs), history=hist)


_RESPONDER_FULL = """Answer the question using the documents between <documents> and </documents>.
Some documents may be unrelated to the question.

<documents>
{documents}
</documents>

Question: {question}

Think step by step if it helps, then finish with one line of the form
"{phrase} <your answer>." """

_RESPONDER_NO_DOCS_FULL = """Answer the question.

Question: {question}

Think step by step if it helps, then finish with one line of the form
"{phrase} <your answer>." """

_RESPONDER_COMPACT = """{documents}

Question: {question}
Finish with: {phrase} <answer>."""

_RESPONDER_NO_DOCS_COMPACT = """Question: {question}
Finish with: {phrase} <answer>."""


def responder_prompt(question: str, paragraphs: Sequence[str] | None, compact: bool = False) -> str:
    """The responder answers from ``paragraphs``; ``None`` or empty gives the no-document
    prompt used by the grounding check."""
    q = _clip(question, MAX_QUESTION_CHARS)
    if paragraphs:
        tpl = _RESPONDER_COMPACT if compact else _RESPONDER_FULL
        return tpl.format(documents=_documents(paragraphs), question=q, phrase=ANSWER_PHRASE).rstrip()
    tpl = _RESPONDER_NO_DOCS_COMPACT if compact else _RESPONDER_NO_DOCS_FULL
    return tpl.format(question=q, phrase=ANSWER_PHRASE).rstrip()


_VERIFIER_FULL = """Decide whether two answers to the same question say the same thing.
Do not try to solve the question yourself; only compare the two answers.

Question: {question}
Answer A: {candidate}
Answer B: {reference}

Count them as the same when they name the same thing or value, even if worded, abbreviated
or formatted differently (for example "1,200" and "1200 people"). Count them as different
when they name different things or different values.

Explain in a sentence or two, then end with [[YES]] if they are the same or [[NO]] if not."""

_VERIFIER_COMPACT = """Question: {question}
Answer A: {candidate}
Answer B: {reference}
Do A and B give the same answer? End with [[YES]] or [[NO]]."""


def verifier_prompt(question: str, candidate: str, reference: str, compact: bool = False) -> str:
    """The verifier compares the responder's answer (``candidate``) with the
    questioner's (``reference``)."""
    tpl = _VERIFIER_COMPACT if compact else _VERIFIER_FULL
    return tpl.format(
        question=_clip(question, MAX_QUESTION_CHARS),
        candidate=_clip(candidate, MAX_ANSWER_CHARS),
        reference=_clip(reference, MAX_ANSWER_CHARS),
    )
