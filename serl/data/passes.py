"""Shuffled passes over a recipe's data: an endless stream of indices 0..n-1, one fresh
permutation (drawn from the recipe's RNG) after another. Its state is the indices still to
come in the current pass, so a resume continues the same order."""

from __future__ import annotations

import random


class Passes:
    def __init__(self, n: int, rng: random.Random):
        self.n, self.rng = n, rng
        self.order: list[int] = []  # what is left of the current pass, next first

    def next(self) -> int:
        if not self.order:  # a new pass, reshuffled (drawn only when needed)
            self.order = list(range(self.n))
            self.rng.shuffle(self.order)
        return self.order.pop(0)

    def take(self, k: int) -> list[int]:
        return [self.next() for _ in range(k)]

    def state_dict(self) -> list[int]:
        return list(self.order)

    def load_state_dict(self, order: list[int]) -> None:
        self.order = [int(i) for i in order]
