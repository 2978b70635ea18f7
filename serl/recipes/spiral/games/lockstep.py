"""Playing B games in lockstep (SPIRAL's episode collection, Liu et al., 2025; own code, no model).

Every round each unfinished game needs one move. The moves are grouped by the policy id of the seat to
move and each policy is called once per round with all of its requests: in self-play every move of
the round goes into one call to the learner; each opponent snapshot gets one call for its games.
Responses are parsed with ``actions.parse_action``; a move that is missing or illegal ends its game
(the offender gets ``invalid``, the other player ``invalid_opponent``), a game still running after
``max_turns`` moves is a draw, otherwise the game's outcome gives the rewards. ``replay_draws`` plays a
drawn game again on a new deal (spiral-rl's ``filter_draw`` / ``max_draw_retries``).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from .actions import parse_action
from .base import Game
from .prompts import render_prompt, strip_brackets


@dataclass(frozen=True)
class MoveRequest:
    """One move to make: what a policy gets (a text policy needs only ``prompt``)."""

    episode: int
    game: str
    player: int
    prompt: str
    legal_actions: tuple[str, ...]


Policy = Callable[[list[MoveRequest]], Sequence[Any]]  # one str (or object with .text) per request


def text_policy(generate: Callable[[list[str]], Sequence[Any]]) -> Policy:
    """A policy from a prompts -> texts function (e.g. the generator)."""
    return lambda requests: generate([r.prompt for r in requests])


class RandomPolicy:
    """Uniformly random legal moves, answered as ``\\boxed{move}`` (the "random" fixed opponent)."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)

    def __call__(self, requests: list[MoveRequest]) -> list[str]:
        return [f"\\boxed{{{strip_brackets(self.rng.choice(r.legal_actions))}}}" for r in requests]


@dataclass(frozen=True)
class RewardRule:
    """How an episode's end becomes each player's reward."""

    win: float = 1.0  # reward of the winner
    loss: float = -1.0  # reward of the loser
    draw: float = 0.0  # reward of both players in a draw (turn limit included)
    invalid: float = -1.5  # reward of the player whose move was missing or illegal (SPIRAL's default)
    invalid_opponent: float = 0.5  # reward of the other player in that case (SPIRAL's default)
    use_payoffs: bool = False  # reward a normal ending with the game's payoffs (chips in Kuhn Poker)


@dataclass
class Turn:
    """One move: who, what it saw and said, and what came of it (``output`` is the policy's raw return,
    e.g. a generation result with token ids; ``response`` its text)."""

    episode: int
    game: str
    player: int
    policy: str
    prompt: str
    response: str
    output: Any
    action: str | None  # the legal action played, None if the move was invalid
    raw: str | None  # the candidate read from the response
    status: str  # "ok", "illegal" or "missing"
    legal_actions: tuple[str, ...] = ()  # what the player could play (to re-parse the response another way)


@dataclass
class Episode:
    """How one game ended, with both players' rewards (see ``RewardRule``)."""

    index: int  # position of the game in the batch (``Turn.episode`` refers to it)
    game: str  # registry name
    seats: tuple[str, str]  # policy id of seat 0 and seat 1
    rewards: tuple[float, float]
    payoffs: tuple[float, float]  # native payoffs; (0, 0) when ended by an invalid move or the turn limit
    winner: int | None  # an invalid move hands the win to the other player
    invalid_player: int | None
    truncated: bool  # hit the turn limit
    turns: int  # moves made, the invalid one included

    def outcome(self, player: int) -> str:
        return "draw" if self.winner is None else "win" if self.winner == player else "loss"


def pair_seats(opponents: Sequence[str], learner: str = "current", first_seat: int = 0) -> list[tuple[str, str]]:
    """Seats for one episode per opponent, the learner alternating seats (``first_seat`` first)."""
    return [(learner, o) if (i + first_seat) % 2 == 0 else (o, learner) for i, o in enumerate(opponents)]


def _text(output: Any) -> str:
    if isinstance(output, str):
        return output
    text = getattr(output, "text", None)
    if not isinstance(text, str):
        raise TypeError(f"a policy must return str or objects with a .text str, got {type(output).__name__}")
    return text


def play_lockstep(
    games: Sequence[Game],
    seats: Sequence[tuple[str, str]],
    policies: dict[str, Policy],
    *,
    rule: RewardRule = RewardRule(),
    max_turns: int | None = None,
    prompt: Callable[[Game], str] = render_prompt,
    parse_options: dict | None = None,
) -> tuple[list[Turn], list[Episode]]:
    """Play the (already reset) ``games`` to the end; ``seats[i]`` names the policies of game i's seats.
    ``max_turns`` overrides each game's own limit. Returns the turns in play order and one Episode per
    game, in game order."""
    if len(games) != len(seats):
        raise ValueError(f"play_lockstep: {len(games)} games but {len(seats)} seat pairs")
    for i, (g, pair) in enumerate(zip(games, seats)):
        if g.done:
            raise ValueError(f"play_lockstep: game {i} ({g.name}) is already over; reset it first")
        for pid in pair:
            if pid not in policies:
                raise ValueError(f"play_lockstep: game {i} seats unknown policy {pid!r}; known: {sorted(policies)}")
    parse_options = parse_options or {}
    turns: list[Turn] = []
    episodes: list[Episode | None] = [None] * len(games)
    counts = [0] * len(games)

    def close(i: int, **kw) -> None:
        episodes[i] = Episode(index=i, game=games[i].name, seats=(seats[i][0], seats[i][1]), turns=counts[i], **kw)

    while True:
        active = [i for i in range(len(games)) if episodes[i] is None]
        if not active:
            break
        by_policy: dict[str, list[tuple[int, MoveRequest]]] = defaultdict(list)
        for i in active:
            g = games[i]
            player = g.current_player
            req = MoveRequest(i, g.name, player, prompt(g), tuple(g.legal_actions()))
            by_policy[seats[i][player]].append((i, req))
        for pid, items in by_policy.items():
            outputs = list(policies[pid]([req for _, req in items]))
            if len(outputs) != len(items):
                raise ValueError(f"policy {pid!r} returned {len(outputs)} responses for {len(items)} requests")
            for (i, req), out in zip(items, outputs):
                g, text = games[i], _text(out)
                parsed = parse_action(text, req.legal_actions, **parse_options)
                ok = parsed.valid and parsed.action is not None and g.step(parsed.action)
                counts[i] += 1
                turns.append(
                    Turn(
                        i,
                        g.name,
                        req.player,
                        pid,
                        req.prompt,
                        text,
                        out,
                        parsed.action if ok else None,
                        parsed.raw,
                        parsed.status,
                        req.legal_actions,
                    )
                )
                limit = g.max_turns if max_turns is None else max_turns
                if not ok:
                    bad = [rule.invalid_opponent] * 2
                    bad[req.player] = rule.invalid
                    close(
                        i,
                        rewards=tuple(bad),
                        payoffs=(0.0, 0.0),
                        winner=1 - req.player,
                        invalid_player=req.player,
                        truncated=False,
                    )
                elif g.done:
                    w, pay = g.winner(), tuple(g.payoffs())
                    if rule.use_payoffs:
                        r = pay
                    else:
                        r = (
                            (rule.draw, rule.draw)
                            if w is None
                            else (rule.win, rule.loss)
                            if w == 0
                            else (rule.loss, rule.win)
                        )
                    close(i, rewards=tuple(r), payoffs=pay, winner=w, invalid_player=None, truncated=False)
                elif counts[i] >= limit:
                    close(
                        i,
                        rewards=(rule.draw, rule.draw),
                        payoffs=(0.0, 0.0),
                        winner=None,
                        invalid_player=None,
                        truncated=True,
                    )
    return turns, cast("list[Episode]", episodes)  # every game has ended: none is left None


def replay_draws(
    turns: list[Turn],
    episodes: list[Episode],
    redeal: Callable[[int], Game],
    retries: int,
    seats: Sequence[tuple[str, str]],
    policies: dict[str, Policy],
    **play,
) -> tuple[list, list, int]:
    """spiral-rl's draw retry (``filter_draw``, ``max_draw_retries``; spiral/tinker/training/rollouts.py):
    a game that ended without a winner (a drawn position or the turn limit) is played again, same
    seats, on the new deal ``redeal(i)``, up to ``retries`` times; after that its last draw stands.
    The turns of a replaced game are dropped. Replays of one round are played together in lockstep.
    Returns the turns, the episodes (game order kept) and the number of replays."""
    episodes, replays = list(episodes), 0
    for _ in range(retries):
        drawn = [i for i, ep in enumerate(episodes) if ep.winner is None]
        if not drawn:
            break
        new_turns, new_eps = play_lockstep([redeal(i) for i in drawn], [seats[i] for i in drawn], policies, **play)
        gone = set(drawn)
        turns = [t for t in turns if t.episode not in gone] + [replace(t, episode=drawn[t.episode]) for t in new_turns]
        for k, ep in enumerate(new_eps):
            episodes[drawn[k]] = replace(ep, index=drawn[k])
        replays += len(drawn)
    return turns, episodes, replays
