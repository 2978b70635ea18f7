"""Nim: a small deterministic two-player game that is not one of SPIRAL's four TextArena games.

``piles`` heaps of stones, each dealt 1..``max_stones`` at reset (the only chance in the game).
Players alternate; a move takes 1..``max_take`` stones from one non-empty pile, written
``[take 2 from pile 3]`` (piles numbered from 1). Whoever takes the last stone wins (normal play),
so every game has a winner and ends within the number of stones dealt. A position is lost for the
player to move exactly when the XOR of the piles' Grundy values, n mod (max_take + 1), is 0
(Bouton, 1901; Sprague-Grundy); ``winning_moves`` lists the moves that leave it at 0 (used by
the tests, and usable as a skill measure).
"""

from __future__ import annotations

from functools import reduce
from operator import xor

from .base import Game


class Nim(Game):
    name = "nim"

    def __init__(self, piles: int = 3, max_stones: int = 5, max_take: int = 5) -> None:
        super().__init__()
        if not 1 <= piles <= 5 or not 1 <= max_stones <= 9 or max_take < 1:
            raise ValueError(
                f"nim: need 1 <= piles <= 5, 1 <= max_stones <= 9 and max_take >= 1 "
                f"(got {piles}, {max_stones}, {max_take})"
            )
        self.num_piles, self.max_stones, self.max_take = piles, max_stones, max_take
        self.max_turns = piles * max_stones  # each move takes at least one stone

    def _reset(self) -> None:
        self.piles = [self.rng.randint(1, self.max_stones) for _ in range(self.num_piles)]

    @property
    def current_player(self) -> int:
        return self.turn % 2

    def _legal_actions(self) -> list[str]:
        return [
            f"[take {n} from pile {p + 1}]"
            for p, size in enumerate(self.piles)
            for n in range(1, min(size, self.max_take) + 1)
        ]

    def _apply(self, action: str) -> None:
        words = action[1:-1].split()  # take N from pile P
        self.piles[int(words[4]) - 1] -= int(words[1])
        if not any(self.piles):
            self._finish(self.current_player)  # the mover took the last stone

    def nim_sum(self, piles: list[int] | None = None) -> int:
        """XOR of the piles' Grundy values: 0 exactly when the player to move loses against best play."""
        return reduce(xor, (n % (self.max_take + 1) for n in (self.piles if piles is None else piles)), 0)

    def winning_moves(self) -> list[str]:
        """Legal moves that leave a nim-sum of 0 (none when the position is lost)."""
        out = []
        for a in self.legal_actions():
            words, piles = a[1:-1].split(), list(self.piles)
            piles[int(words[4]) - 1] -= int(words[1])
            out += [a] if self.nim_sum(piles) == 0 else []
        return out

    def _observation(self, player: int) -> str:
        piles = ", ".join(f"pile {i + 1}: {n}" for i, n in enumerate(self.piles))
        history = "; ".join(f"Player {p}: {a}" for p, a in self.history) or "none"
        return (
            f"You are Player {player} in Nim. There are {self.num_piles} piles of stones. On your turn take "
            f"1 to {self.max_take} stones from one pile, e.g. [take 2 from pile 1]. Whoever takes the last "
            f"stone wins.\n\nStones left: {piles}\nMoves so far: {history}"
        )
