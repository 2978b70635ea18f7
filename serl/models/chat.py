"""Model input from untrusted text: token ids whose only control tokens are the chat
template's own.

Seeds, documents, generated problems, model answers and benchmark questions are text a
user or a policy wrote. Tokenized the usual way, a seed that contains
``<|im_end|>\\n<|im_start|>assistant`` becomes real control tokens and forges a turn.
Here every message's content (and a prefill) is tokenized with ``split_special_tokens``,
so such strings stay ordinary characters; only the markers the template itself writes
are control tokens. For content without special-token strings the ids are exactly those
of tokenizing the rendered template as one string, so nothing changes for clean data.

Every path that sends text to a model goes through here: the recipes' prompts, the
few-shot prompts of self-instruction, SPIN's human answers and ``serl eval``. The
generators take these ids as they are (``prompt_ids``); the learner trains on the ids the
generator returns with each completion, so training sees what generation saw.
"""

from __future__ import annotations

import re

# Private-use characters stand in for each message's content while the template renders,
# so the template's own text can be told apart from the content.
_MARK = "\ue000{}\ue001"
_MARK_RE = re.compile("\ue000(\\d+)\ue001")


class ChatTemplateError(ValueError):
    """A chat template that does not place each message's content exactly once."""


def text_ids(tok, text: str) -> list[int]:
    """``text`` as plain characters: special-token strings in it are not control tokens."""
    if not text:
        return []
    return list(tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])


def chat_ids(tok, messages: list[dict], *, add_generation_prompt: bool = True, prefill: str = "") -> list[int]:
    """The chat template applied to ``messages`` (role, content), as token ids in which
    every content, and ``prefill`` (the start of the reply), is plain text."""
    marked = [{**m, "content": _MARK.format(i)} for i, m in enumerate(messages)]
    rendered = tok.apply_chat_template(marked, add_generation_prompt=add_generation_prompt, tokenize=False)
    for i in range(len(messages)):
        if rendered.count(_MARK.format(i)) != 1:
            raise ChatTemplateError(
                "the tokenizer's chat template does not place each message's content "
                "exactly once; serl cannot keep untrusted text out of its control tokens"
            )
    specials = _special_tokens(tok)
    runs: list[str | int] = [""]  # text runs (template text joined with contents) and control-token ids
    strip_next = False
    pieces = _MARK_RE.split(rendered)  # template text, index, template text, index, ...
    for k, piece in enumerate(pieces):
        if k % 2:  # a message's content: text, whatever it holds
            runs[-1] = str(runs[-1]) + str(messages[int(piece)]["content"])
            continue
        for j, part in enumerate(specials[0].split(piece) if specials else [piece]):
            if j % 2 == 0:
                if strip_next:
                    part, strip_next = part.lstrip(), False
                runs[-1] = str(runs[-1]) + part
                continue
            lstrip, rstrip, tid = specials[1][part]
            if lstrip:  # the tokenizer eats whitespace around such tokens; so do we
                runs[-1] = str(runs[-1]).rstrip()
            runs += [tid, ""]
            strip_next = rstrip
    runs[-1] = str(runs[-1]) + prefill  # the last run is text: a token id is always followed by one
    ids: list[int] = []
    for r in runs:
        ids += [r] if isinstance(r, int) else text_ids(tok, r)
    return ids


def user_ids(tok, content: str, instruction: str = "", prefill: str = "") -> list[int]:
    """One user turn, ``instruction`` on its own line after ``content``, and the reply's start."""
    text = f"{content}\n{instruction}" if instruction else content
    return chat_ids(tok, [{"role": "user", "content": text}], prefill=prefill)


def prompt_ids(tok, prompt) -> list[int]:
    """What a generator feeds the model for ``prompt``: token ids as they are (built here),
    or a string that is already final model input (its special tokens are real)."""
    if isinstance(prompt, str):
        return list(tok(prompt, add_special_tokens=False)["input_ids"])
    return [int(t) for t in prompt]


def control_ids(tok) -> set[int]:
    """Ids of the tokenizer's special tokens (``<|im_start|>``, ``<|im_end|>``, EOS, ...)."""
    specials = _special_tokens(tok)
    return {tid for _, _, tid in specials[1].values()} if specials else set()


def _special_tokens(tok):
    """(regex matching any special token, {content: (lstrip, rstrip, id)}), or None."""
    table = {}
    for tid, t in (getattr(tok, "added_tokens_decoder", None) or {}).items():
        if getattr(t, "special", False) and t.content:
            table[t.content] = (bool(getattr(t, "lstrip", False)), bool(getattr(t, "rstrip", False)), int(tid))
    if not table:
        return None
    alts = "|".join(re.escape(c) for c in sorted(table, key=len, reverse=True))
    return re.compile(f"({alts})"), table
