"""Two-player zero-sum text games and the code that plays them with text policies.

Environments: the four games SPIRAL trains on (Liu et al., 2025) and Nim, written for serl behind one
protocol (``base.Game``), and this registry. Around them: ``prompts`` (the text of one turn), ``actions`` (a
response -> a legal move), ``lockstep`` (the actor: plays B games at once, one policy call per round and
policy) and ``exploit`` (Kuhn Poker's exact best response and exploitability). Nothing here loads a
model; the recipe (``serl.recipes.spiral``) and ``serl eval --games`` (``serl.recipes.spiral.evaluate``) build on it."""

from __future__ import annotations

from .base import Game, make_rng
from .kuhn import KuhnPoker
from .liars_dice import LiarsDice
from .negotiation import SimpleNegotiation
from .nim import Nim
from .tictactoe import TicTacToe

GAMES: dict[str, type[Game]] = {
    "tictactoe": TicTacToe,
    "kuhn_poker": KuhnPoker,
    "simple_negotiation": SimpleNegotiation,
    "liars_dice": LiarsDice,
    "nim": Nim,  # not one of SPIRAL's games: a small deterministic one of our own
}


# TextArena's environment ids, as spiral-rl's --env_ids names them, for the games serl has. spiral-rl
# 0.2.0 (spiral/core/envs) registers LiarsDice-v1 as its own Liar's Dice (the rules of -v0, bids and a
# call, with fixes to whose turn it is) and SimpleNegotiation-v1 as the two-resource game
TEXTARENA_IDS = {
    "TicTacToe-v0": "tictactoe",
    "KuhnPoker-v1": "kuhn_poker",
    "SimpleNegotiation-v1": "simple_negotiation",
    "LiarsDice-v0": "liars_dice",
    "LiarsDice-v1": "liars_dice",
}
# ids spiral-rl's README lists whose game serl does not have, and why
OTHER_IDS = {
    "SimpleNegotiation-v2": "spiral-rl's five-resource negotiation; serl's simple_negotiation is the "
    "two-resource game of SimpleNegotiation-v1",
    "ConnectFour-v0": "serl has no Connect Four",
    "TruthAndDeception-v1": "serl has no Truth and Deception",
    "PigDice-v1": "serl has no Pig",
    "WordChains-v1": "serl has no Word Chains",
    "SpellingBee-v1": "serl has no Spelling Bee",
    "SimpleBlindAuction-v1": "serl has no blind auction",
}


def check_game_names(names: str | list[str]) -> list[str]:
    """The game names of a comma-separated string or a list, each checked against ``GAMES``;
    TextArena's ids (``TicTacToe-v0``, ...) are read as serl's names."""
    items = [n.strip() for n in names.split(",")] if isinstance(names, str) else [str(n).strip() for n in names]
    items = [TEXTARENA_IDS.get(n, n) for n in items if n]
    if not items:
        raise ValueError(f"no game given; known games: {', '.join(GAMES)}")
    for n in items:
        if n in OTHER_IDS:
            raise ValueError(
                f"{n}: {OTHER_IDS[n]}; serl's games: {', '.join(GAMES)} (TextArena ids: {', '.join(TEXTARENA_IDS)})"
            )
        if n not in GAMES:
            raise ValueError(
                f"unknown game {n!r}; known games: {', '.join(GAMES)} (TextArena ids: {', '.join(TEXTARENA_IDS)})"
            )
    return items


def make_game(name: str, *, kuhn_rules: str = "standard", **options) -> Game:
    """A new game by registry name (``options`` go to the game's constructor); an unknown name is refused
    with the list of known ones. ``kuhn_rules`` ("standard" or "spiral") applies to Kuhn Poker only."""
    (name,) = check_game_names([name])
    if name == "kuhn_poker":
        options = {"rules": kuhn_rules, **options}
    return GAMES[name](**options)


__all__ = [
    "GAMES",
    "Game",
    "KuhnPoker",
    "LiarsDice",
    "Nim",
    "SimpleNegotiation",
    "TicTacToe",
    "check_game_names",
    "make_game",
    "make_rng",
]
