"""Liar's Dice for two players (one of SPIRAL's games, Liu et al., 2025), without wild ones.

Each player rolls ``dice_per_player`` hidden six-sided dice. Players alternately raise the bid
``[Bid: 2 x 5]`` ("at least two dice on the table show a 5"): a higher quantity, or the same quantity
with a higher face. Instead of raising, a player may ``[Call]`` the last bid: all dice are shown; if the
bid holds the bidder wins the round, otherwise the caller does. The round's loser loses one die and
opens the next round; whoever loses their last die loses the game.
"""

from __future__ import annotations

from .base import Game


class LiarsDice(Game):
    name = "liars_dice"

    def __init__(self, dice_per_player: int = 2) -> None:
        super().__init__()
        if not 1 <= dice_per_player <= 5:
            raise ValueError(f"liars_dice: dice_per_player must be 1..5, got {dice_per_player}")
        self.dice_per_player = dice_per_player
        # a round with t dice on the table lasts at most 6 * t bids and a call; t runs from 2n down to 2
        self.max_turns = sum(6 * t + 1 for t in range(2, 2 * dice_per_player + 1))

    def _reset(self) -> None:
        self.counts = [self.dice_per_player, self.dice_per_player]
        self.rounds: list[str] = []  # one line per finished round
        self._new_round(opener=0)

    def _new_round(self, opener: int) -> None:
        self.dice = [sorted(self.rng.randint(1, 6) for _ in range(n)) for n in self.counts]
        self.bid: tuple[int, int] | None = None  # (quantity, face)
        self.bids: list[str] = []
        self.to_move = opener

    @property
    def current_player(self) -> int:
        return self.to_move

    def _legal_actions(self) -> list[str]:
        total = sum(self.counts)
        q0, f0 = self.bid or (0, 6)
        out = [f"[Bid: {q} x {f}]" for q in range(max(q0, 1), total + 1) for f in range(1, 7) if (q, f) > (q0, f0)]
        return out + (["[Call]"] if self.bid is not None else [])

    def _apply(self, action: str) -> None:
        player = self.to_move
        if action == "[Call]":
            assert self.bid is not None  # [Call] is legal only after a bid
            q, f = self.bid
            shown = sum(d.count(f) for d in self.dice)
            bidder = 1 - player
            loser = player if shown >= q else bidder
            self.rounds.append(
                f"Player {bidder} bid {q} x {f}, Player {player} called; dice were Player 0: "
                f"{self.dice[0]}, Player 1: {self.dice[1]} ({shown} showing {f}); Player {loser} lost a die."
            )
            self.counts[loser] -= 1
            if self.counts[loser] == 0:
                self._finish(1 - loser)
            else:
                self._new_round(opener=loser)
            return
        words = action[1:-1].split()  # Bid: q x f
        self.bid = (int(words[1]), int(words[3]))
        self.bids.append(f"Player {player}: {action}")
        self.to_move = 1 - player

    def _observation(self, player: int) -> str:
        lines = [
            f"You are Player {player} in Liar's Dice. Each player has hidden six-sided dice. On your turn "
            f"either raise the bid, [Bid: Q x F] meaning at least Q of all dice on the table show face F, "
            f"with a higher quantity or the same quantity and a higher face, or [Call] the last bid. On a "
            f"call all dice are shown: if the bid holds the bidder wins the round, else the caller does. "
            f"The round's loser loses a die; losing your last die loses the game. No face is wild.",
            "",
            f"Your dice: {', '.join(map(str, self.dice[player]))}",
            f"Dice left: you {self.counts[player]}, opponent {self.counts[1 - player]}",
        ]
        if self.rounds:
            lines.append("Earlier rounds: " + " ".join(self.rounds))
        lines.append("Bids this round: " + ("; ".join(self.bids) if self.bids else "none"))
        return "\n".join(lines)
