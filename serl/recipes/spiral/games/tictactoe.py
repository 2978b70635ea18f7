"""TicTacToe on a 3x3 board; moves are cell numbers ``[0]``..``[8]``, row by row (as in SPIRAL's
TicTacToe-v0 via TextArena; Liu et al., 2025). Player 0 plays X and moves first."""

from __future__ import annotations

from .base import Game

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
MARKS = ("X", "O")


class TicTacToe(Game):
    name = "tictactoe"
    max_turns = 9

    def _reset(self) -> None:
        self.board: list[str | None] = [None] * 9

    @property
    def current_player(self) -> int:
        return self.turn % 2

    def _legal_actions(self) -> list[str]:
        return [f"[{i}]" for i in range(9) if self.board[i] is None]

    def _apply(self, action: str) -> None:
        player = self.current_player
        self.board[int(action[1:-1])] = MARKS[player]
        if any(all(self.board[i] == MARKS[player] for i in line) for line in LINES):
            self._finish(player)
        elif all(cell is not None for cell in self.board):
            self._finish(None)

    def board_text(self) -> str:
        rows = []
        for r in range(3):
            rows.append(" | ".join(self.board[3 * r + c] or str(3 * r + c) for c in range(3)))
        return "\n---------\n".join(rows)

    def _observation(self, player: int) -> str:
        return (
            f"You are Player {player} in TicTacToe and play {MARKS[player]}; your opponent plays "
            f"{MARKS[1 - player]}. Players take turns marking an empty cell; three marks in a row, column "
            f"or diagonal win, a full board without a line is a draw. Cells are numbered 0 to 8, row by "
            f"row; a number on the board means the cell is empty.\n\nBoard:\n{self.board_text()}"
        )
