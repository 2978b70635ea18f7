"""The protocol every game follows (two players, alternating or not, zero-sum outcome).

A game is a small mutable object: ``reset(seed)`` deals a new game, ``current_player`` says who moves,
``observation(player)`` is what that player may see, as text, ``legal_actions()`` lists the moves of the
current player as bracketed strings (``"[bet]"``, ``"[4]"``), ``step(action)`` applies one of them and
returns False, changing nothing, for anything else. When ``done``, ``winner()`` is 0, 1 or None (draw)
and ``payoffs()`` the native zero-sum payoffs (chips in Kuhn Poker, otherwise +1/-1/0).

Invalid moves and turn limits are judged by the caller (see ``lockstep.py``): the game itself only says
whether a move is legal. ``max_turns`` is a safety limit: a game still running after that many moves
is scored as a draw by the lockstep runner, as SPIRAL (Liu et al., 2025) does with truncated games.
"""

from __future__ import annotations

import random
from typing import ClassVar, TypeVar


def make_rng(seed: int | random.Random | None) -> random.Random:
    """A Random from an int seed, an existing Random (used as is), or None (fresh entropy)."""
    if isinstance(seed, random.Random):
        return seed
    if seed is not None and not isinstance(seed, int):
        raise TypeError(f"seed must be an int, a random.Random or None, got {type(seed).__name__}")
    return random.Random(seed)


G = TypeVar("G", bound="Game")


class Game:
    """Base class: subclasses set ``name``/``max_turns`` and implement the ``_``-prefixed hooks."""

    name: ClassVar[str] = ""
    num_players: ClassVar[int] = 2
    max_turns: int = 50

    def __init__(self) -> None:
        self.rng = random.Random(0)
        self.turn = 0  # moves made so far
        self.history: list[tuple[int, str]] = []  # (player, action) of every legal move
        self.done = False
        self._winner: int | None = None

    # --- the protocol -------------------------------------------------------------------------------
    def reset(self: G, seed: int | random.Random | None = None) -> G:
        self.rng = make_rng(seed)
        self.turn = 0
        self.history = []
        self.done = False
        self._winner = None
        self._reset()
        return self

    @property
    def current_player(self) -> int:
        raise NotImplementedError

    def observation(self, player: int) -> str:
        self._check_player(player)
        return self._observation(player)

    def legal_actions(self) -> list[str]:
        return [] if self.done else self._legal_actions()

    def step(self, action: str) -> bool:
        """Apply ``action`` (exactly one of ``legal_actions()``) for the current player; False if it is
        not legal (the state is then unchanged)."""
        if self.done or action not in self._legal_actions():
            return False
        player = self.current_player
        self._apply(action)
        self.history.append((player, action))
        self.turn += 1
        return True

    def winner(self) -> int | None:
        self._check_done()
        return self._winner

    def payoffs(self) -> tuple[float, float]:
        """Native zero-sum payoffs; by default +1 to the winner, -1 to the loser, 0 each for a draw."""
        w = self.winner()
        return (0.0, 0.0) if w is None else (1.0, -1.0) if w == 0 else (-1.0, 1.0)

    # --- helpers for subclasses ---------------------------------------------------------------------
    def _finish(self, winner: int | None) -> None:
        self.done = True
        self._winner = winner

    def _check_player(self, player: int) -> None:
        if player not in (0, 1):
            raise ValueError(f"{self.name}: player must be 0 or 1, got {player!r}")

    def _check_done(self) -> None:
        if not self.done:
            raise RuntimeError(f"{self.name}: the game is not over yet (turn {self.turn})")

    def _reset(self) -> None:
        raise NotImplementedError

    def _observation(self, player: int) -> str:
        raise NotImplementedError

    def _legal_actions(self) -> list[str]:
        raise NotImplementedError

    def _apply(self, action: str) -> None:
        raise NotImplementedError
