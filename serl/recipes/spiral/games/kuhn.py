"""Kuhn Poker, one hand per game (Kuhn, 1950; used by SPIRAL, Liu et al., 2025).

Three cards J < Q < K; each player antes 1 chip and gets one card, the third stays hidden. Player 0
acts first: ``[check]`` or ``[bet]``. After a check the other player may ``[check]`` (showdown) or
``[bet]``; facing a bet a player may ``[call]`` (showdown) or ``[fold]``.

``rules="standard"`` (default): a bet or a call puts one more chip in the pot, so a showdown after a
bet and a call moves 2 chips, any other ending 1. Payoffs are chips won or lost; the first player's
equilibrium value is -1/18 per hand.

``rules="spiral"``: parity with the public SPIRAL implementation, which plays TextArena's
``KuhnPoker-v1`` (textarena 0.6.4): the pot is reset to the two antes and bets and calls never add
chips, so every hand moves exactly 1 chip and a bet only matters by making the other player fold.
Payoffs are then +1/-1 (win/loss), as upstream. Upstream also names the first mover of the first hand
"Player 1"; here it is player 0, a relabelling only. Upstream registers five hands per game, but the
winner of the last hand is declared the game's winner and earlier chips never count, so its reward is
that of one hand, the one played here (docs/algorithms.md). Our default differs because without a
growing pot betting carries no risk or reward of its own and the game loses what makes it poker (bluffing, value
bets), and the known equilibrium and exploitability numbers no longer apply.

Info states are ``(card, history)`` with history over ``c`` (check) and ``b`` (bet) before the decision:
player 0 decides at ``""`` and ``"cb"``, player 1 at ``"c"`` and ``"b"``.
"""

from __future__ import annotations

from .base import Game

CARDS = ("J", "Q", "K")
RULES = ("standard", "spiral")
CODES = {"check": "c", "bet": "b", "call": "k", "fold": "f"}


def terminal_payoffs(cards: tuple[str, str], history: str, rules: str = "standard") -> tuple[float, float] | None:
    """Payoffs of a finished hand (None if ``history`` is not terminal); ``history`` uses c/b/k/f."""
    if history not in ("cc", "bf", "bk", "cbf", "cbk"):
        return None
    stake = 2.0 if (history.endswith("k") and rules == "standard") else 1.0
    if history.endswith("f"):  # the player who folded is the one who moved last
        winner = 1 - (len(history) - 1) % 2
    else:
        winner = 0 if CARDS.index(cards[0]) > CARDS.index(cards[1]) else 1
    return (stake, -stake) if winner == 0 else (-stake, stake)


class KuhnPoker(Game):
    name = "kuhn_poker"
    max_turns = 3

    def __init__(self, rules: str = "standard") -> None:
        super().__init__()
        if rules not in RULES:
            raise ValueError(f"kuhn_poker: rules must be one of {', '.join(RULES)}, got {rules!r}")
        self.rules = rules

    def _reset(self) -> None:
        deck = list(CARDS)
        self.rng.shuffle(deck)
        self.cards = (deck[0], deck[1])
        self.codes = ""  # c/b/k/f per move
        self._payoffs: tuple[float, float] | None = None

    @classmethod
    def at_info_state(
        cls, card: str, history: str, opponent_card: str | None = None, rules: str = "standard"
    ) -> KuhnPoker:
        """A game positioned at info state ``(card, history)`` of the player to move (the opponent holds
        ``opponent_card``, by default the lowest other card; the mover cannot tell the difference)."""
        if card not in CARDS or history not in ("", "c", "b", "cb"):
            raise ValueError(f"kuhn_poker: no info state ({card!r}, {history!r})")
        other = opponent_card or next(c for c in CARDS if c != card)
        if other == card or other not in CARDS:
            raise ValueError(f"kuhn_poker: opponent card {other!r} impossible with {card!r}")
        game = cls(rules).reset(0)
        mover = len(history) % 2
        game.cards = (card, other) if mover == 0 else (other, card)
        for code in history:
            game.step("[check]" if code == "c" else "[bet]")  # always legal on these four histories
        return game

    @property
    def current_player(self) -> int:
        return len(self.codes) % 2

    def info_state(self, player: int | None = None) -> tuple[str, str]:
        """``(card, history)`` of ``player`` (default: the player to move)."""
        player = self.current_player if player is None else player
        return self.cards[player], self.codes

    def _legal_actions(self) -> list[str]:
        return ["[fold]", "[call]"] if self.codes.endswith("b") else ["[check]", "[bet]"]

    def _apply(self, action: str) -> None:
        self.codes += CODES[action[1:-1]]
        self._payoffs = terminal_payoffs(self.cards, self.codes, self.rules)
        if self._payoffs is not None:
            self._finish(0 if self._payoffs[0] > 0 else 1)

    def payoffs(self) -> tuple[float, float]:
        self._check_done()
        assert self._payoffs is not None  # set at the last move
        return self._payoffs

    def contributions(self) -> tuple[int, int]:
        """Chips each player has put in so far (antes included)."""
        put = [1, 1]
        if self.rules == "standard":
            for i, code in enumerate(self.codes):
                put[i % 2] += code in "bk"
        return put[0], put[1]

    def _observation(self, player: int) -> str:
        names = {"c": "checks", "b": "bets", "k": "calls", "f": "folds"}
        moves = [f"Player {i % 2} {names[c]}" for i, c in enumerate(self.codes)]
        if self.rules == "standard":
            pot_rule = "A bet or a call adds 1 chip to the pot."
        else:
            pot_rule = "Bets and calls do not add chips: the pot is always the 2 antes."
        return (
            f"You are Player {player} in one hand of Kuhn Poker. The deck has three cards, J < Q < K; each "
            f"player antes 1 chip and receives one card, the third card is not used. Player 0 acts first "
            f"and may check or bet; after a check the other player may check or bet; a player facing a bet "
            f"may call or fold. {pot_rule} Folding gives the pot to the opponent; otherwise the higher card "
            f"wins the pot.\n\nYour card: {self.cards[player]}\nPot: {sum(self.contributions())} chips\n"
            f"Moves so far: {'; '.join(moves) if moves else 'none'}"
        )
