"""Labelled verifier pairs from the training side, served balanced: what the SPELL recipe's
verifier warm-up (``--verifier_warmup_steps``) trains on before self-play.

A pair is (question, candidate, gold), one JSON object a line (``dataset/docs_train_verify.jsonl``,
written by :mod:`serl.recipes.spell.docs` from the training clusters, has this shape); its label is the
caller's rule score of the candidate against the gold (SPELL: cover-EM), not a label in the
file, so that the warm-up teaches the verifier the signal self-play trains it to agree with.
Pairs come in equal numbers of rule-right and rule-wrong ones, each class from its own
shuffled passes (:class:`serl.data.passes.Passes`), so a resume continues the same order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from serl import DataError
from serl.data.jsonl import keyed_rows
from serl.data.passes import Passes


@dataclass(frozen=True)
class Pair:
    question: str
    candidate: str
    gold: str
    label: float  # the rule score of the candidate against the gold: 1.0 right, 0.0 wrong


def read_pairs(path: str, score, heldout: str = "") -> list[Pair]:
    """The pairs of ``path`` (errors name file, line and key), labelled by ``score``
    (candidates, golds -> rule scores). A pair asking a question of the ``heldout`` file is
    refused: the warm-up must never see held-out items."""
    rows = keyed_rows(path, ("question", "candidate", "gold"))
    held = {str(r["question"]).strip() for r in keyed_rows(heldout, ("question",))} if heldout else set()
    for r in rows:
        if str(r["question"]).strip() in held:
            raise DataError(
                f"{path}:{r['line']}: question {str(r['question']).strip()[:60]!r} is one of the held-out "
                f"file {heldout}; the warm-up trains on training-side pairs only"
            )
    labels = score([str(r["candidate"]) for r in rows], [str(r["gold"]) for r in rows])
    return [Pair(str(r["question"]), str(r["candidate"]), str(r["gold"]), float(s)) for r, s in zip(rows, labels)]


class Balanced:
    """Pairs in equal numbers of rule-right and rule-wrong (the right one first of each two),
    each class from its own shuffled passes; the state is where the passes stand."""

    def __init__(self, pairs: list[Pair], rng: random.Random, source: str = "pairs"):
        self.right = [p for p in pairs if p.label == 1.0]
        self.wrong = [p for p in pairs if p.label == 0.0]
        if not self.right or not self.wrong:
            raise DataError(
                f"{source}: the warm-up needs rule-right and rule-wrong pairs; it has "
                f"{len(self.right)} right and {len(self.wrong)} wrong"
            )
        self.passes = (Passes(len(self.right), rng), Passes(len(self.wrong), rng))

    def take(self, n: int) -> list[Pair]:
        return [
            self.right[self.passes[0].next()] if i % 2 == 0 else self.wrong[self.passes[1].next()] for i in range(n)
        ]

    def state_dict(self) -> dict:
        return {"right": self.passes[0].state_dict(), "wrong": self.passes[1].state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.passes[0].load_state_dict(state["right"])
        self.passes[1].load_state_dict(state["wrong"])
