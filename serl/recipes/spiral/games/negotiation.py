"""Simple Negotiation: two resources, opposite valuations, a fixed number of turns.

After the SimpleNegotiation game SPIRAL trains on (Liu et al., 2025; TextArena's two-resource
variant): both players start with the same stock of Wood and Gold, one values Wood low and Gold high,
the other the reverse (which player is which is drawn at reset). On a turn without a pending offer a
player proposes a trade ``[Offer: 2 Wood -> 1 Gold]`` (I give 2 Wood, you give me 1 Gold) or
``[Pass]``; facing an offer the player answers ``[Accept]`` (the trade happens) or ``[Deny]``. After
``num_turns`` moves the player whose inventory gained more value by their own valuation wins; equal
gains are a draw. Offers are limited to 1..``max_quantity`` units each way and to what both own, so
the legal actions form a short list.
"""

from __future__ import annotations

from .base import Game

RESOURCES = ("Wood", "Gold")


class SimpleNegotiation(Game):
    name = "simple_negotiation"

    def __init__(
        self, num_turns: int = 6, start: int = 5, low_value: int = 5, high_value: int = 15, max_quantity: int = 2
    ) -> None:
        super().__init__()
        if num_turns < 1 or start < 0 or max_quantity < 1 or low_value >= high_value:
            raise ValueError(
                "simple_negotiation: need num_turns >= 1, start >= 0, max_quantity >= 1 and "
                f"low_value < high_value (got {num_turns}, {start}, {max_quantity}, "
                f"{low_value}, {high_value})"
            )
        self.num_turns, self.start, self.max_quantity = num_turns, start, max_quantity
        self.low_value, self.high_value = low_value, high_value
        self.max_turns = num_turns

    def _reset(self) -> None:
        low, high = self.low_value, self.high_value
        first = (low, high) if self.rng.random() < 0.5 else (high, low)  # values of (Wood, Gold)
        self.values = (first, (first[1], first[0]))
        self.inventory = [[self.start, self.start], [self.start, self.start]]
        self.pending: tuple[int, int, int, int] | None = None  # (proposer, give_resource, give_n, get_n)

    @property
    def current_player(self) -> int:
        return self.turn % 2

    def worth(self, player: int) -> int:
        return sum(n * v for n, v in zip(self.inventory[player], self.values[player]))

    def _offers(self) -> list[str]:
        me, you = self.inventory[self.current_player], self.inventory[1 - self.current_player]
        out = []
        for give in (0, 1):
            get = 1 - give
            for a in range(1, min(self.max_quantity, me[give]) + 1):
                for b in range(1, min(self.max_quantity, you[get]) + 1):
                    out.append(f"[Offer: {a} {RESOURCES[give]} -> {b} {RESOURCES[get]}]")
        return out

    def _legal_actions(self) -> list[str]:
        if self.pending is not None:
            return ["[Accept]", "[Deny]"]
        return self._offers() + ["[Pass]"]

    def _apply(self, action: str) -> None:
        player = self.current_player
        if action == "[Accept]":
            assert self.pending is not None  # [Accept] is legal only with an offer pending
            proposer, give, a, b = self.pending
            get = 1 - give
            self.inventory[proposer][give] -= a
            self.inventory[player][give] += a
            self.inventory[player][get] -= b
            self.inventory[proposer][get] += b
            self.pending = None
        elif action == "[Deny]":
            self.pending = None
        elif action.startswith("[Offer:"):
            words = action[1:-1].split()  # Offer: a R1 -> b R2
            self.pending = (player, RESOURCES.index(words[2]), int(words[1]), int(words[4]))
        if self.turn + 1 >= self.num_turns:
            gains = [self.worth(p) - self.start * sum(self.values[p]) for p in (0, 1)]
            self._finish(None if gains[0] == gains[1] else 0 if gains[0] > gains[1] else 1)

    def _observation(self, player: int) -> str:
        v = self.values[player]
        inv = self.inventory[player]
        lines = [
            f"You are Player {player} in a trading game with two resources, Wood and Gold. You value Wood "
            f"at {v[0]} and Gold at {v[1]} per unit; your opponent values them the other way round. You "
            f"both started with {self.start} Wood and {self.start} Gold. On your turn you either offer a "
            f"trade, e.g. [Offer: 2 Wood -> 1 Gold] means you give 2 Wood and receive 1 Gold, or pass; "
            f"a player facing an offer must accept or deny it. After {self.num_turns} moves in total the "
            f"player whose inventory value rose more, by their own values, wins.",
            "",
            f"Your inventory: {inv[0]} Wood, {inv[1]} Gold (worth {self.worth(player)}; "
            f"at the start {self.start * sum(v)})",
            f"Moves left: {self.num_turns - self.turn}",
            "History: " + ("; ".join(f"Player {p}: {a}" for p, a in self.history) or "none"),
        ]
        if self.pending is not None and self.pending[0] != player:
            _, give, a, b = self.pending
            lines.append(f"Pending offer to you: you receive {a} {RESOURCES[give]} and give {b} {RESOURCES[1 - give]}.")
        return "\n".join(lines)
