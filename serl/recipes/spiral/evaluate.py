"""Evaluating a game-playing text policy (the evaluation of SPIRAL, Liu et al., 2025; own code).

- ``play_match``: N games against an opponent policy, the policy alternating seats (even games seat 0,
  odd games seat 1), the deals fixed by ``seed`` so that two policies meet the same deals. Reported:
  win/loss/draw rates (95% Wilson interval on the win rate), the mean payoff per game with a 95% normal
  interval (chips in Kuhn Poker, +1/-1/0 elsewhere; an invalid move forfeits: -1 to the offender, +1
  to the other player, as a fold does in Kuhn Poker), the payoff per seat and the invalid-move rate;
  ``invalid_rate_strict`` is the share of the same moves that upstream's strict parser would refuse
  (equal to ``invalid_rate`` under the strict parser; higher under a lenient one).
- ``kuhn_exploitability``: action frequencies at the 12 Kuhn info states from K samples each, then the
  exact best response (``serl.recipes.spiral.games.exploit``): 0 at equilibrium, 11/24 for uniform random.
- ``cli_run``: ``serl eval --games kuhn_poker,tictactoe --opponents random,PATH ...``.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from serl.eval import stats
from serl.models.chat import user_ids
from serl.recipes.spiral.games import check_game_names, make_game
from serl.recipes.spiral.games.actions import PARSERS, parse_action, parser_options
from serl.recipes.spiral.games.exploit import best_response, estimate_policy, text_sampler
from serl.recipes.spiral.games.lockstep import Policy, RandomPolicy, RewardRule, pair_seats, play_lockstep, text_policy
from serl.recipes.spiral.games.prompts import render_prompt

FORFEIT = RewardRule(invalid=-1.0, invalid_opponent=1.0, use_payoffs=True)  # payoffs, invalid = forfeit
Z95 = 1.959964


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion k/n (``serl.eval.stats.wilson``), [0, 1] when n = 0."""
    if n == 0:
        return 0.0, 1.0
    lo, hi = stats.wilson(k, n, z)
    return max(0.0, lo), min(1.0, hi)


def mean_ci(xs: Sequence[float], z: float = Z95) -> tuple[float, float, float]:
    """Mean and its normal-approximation interval (sample standard deviation)."""
    n = len(xs)
    if n == 0:
        return math.nan, math.nan, math.nan
    m = sum(xs) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0
    return m, m - z * sd / math.sqrt(n), m + z * sd / math.sqrt(n)


def play_match(
    policy: Policy,
    opponent: Policy,
    game: str,
    n_games: int,
    *,
    seed: int = 0,
    kuhn_rules: str = "standard",
    max_turns: int | None = None,
    prompt: Callable = render_prompt,
    parse_options: dict | None = None,
) -> dict[str, float]:
    """``policy`` against ``opponent`` over ``n_games`` games of ``game`` (see the module doc)."""
    games = [make_game(game, kuhn_rules=kuhn_rules).reset(seed + i) for i in range(n_games)]
    seats = pair_seats(["opponent"] * n_games, "learner")
    turns, episodes = play_lockstep(
        games,
        seats,
        {"learner": policy, "opponent": opponent},
        rule=FORFEIT,
        max_turns=max_turns,
        prompt=prompt,
        parse_options=parse_options,
    )
    mine = [0 if ep.seats[0] == "learner" else 1 for ep in episodes]
    pay = [ep.rewards[s] for ep, s in zip(episodes, mine)]
    wins = sum(ep.outcome(s) == "win" for ep, s in zip(episodes, mine))
    losses = sum(ep.outcome(s) == "loss" for ep, s in zip(episodes, mine))
    moves = [t for t in turns if t.policy == "learner"]
    m, lo, hi = mean_ci(pay)
    wlo, whi = wilson(wins, n_games)
    out = {
        "n": float(n_games),
        "win_rate": wins / n_games,
        "win_lo": wlo,
        "win_hi": whi,
        "loss_rate": losses / n_games,
        "draw_rate": (n_games - wins - losses) / n_games,
        "payoff": m,
        "payoff_lo": lo,
        "payoff_hi": hi,
        "invalid_rate": sum(t.action is None for t in moves) / len(moves) if moves else 0.0,
        "invalid_rate_strict": sum(not (t.action and parse_action(t.response, t.legal_actions).valid) for t in moves)
        / len(moves)
        if moves
        else 0.0,
    }
    for seat in (0, 1):
        xs = [p for p, s in zip(pay, mine) if s == seat]
        out[f"payoff_seat{seat}"] = sum(xs) / len(xs) if xs else math.nan
    return out


def kuhn_exploitability(
    generate_texts: Callable[[list[str]], Sequence[str]],
    k: int,
    *,
    rules: str = "standard",
    prompt: Callable = render_prompt,
    parse_options: dict | None = None,
) -> dict:
    """Exploitability of the sampled policy (k samples per info state) and its parts."""
    est = estimate_policy(text_sampler(generate_texts, rules, prompt=prompt, **(parse_options or {})), k)
    br0, br1 = best_response(est.policy, 0, rules)[0], best_response(est.policy, 1, rules)[0]
    return {
        "exploitability": (br0 + br1) / 2,
        "best_response_seat0": br0,
        "best_response_seat1": br1,
        "invalid_rate": est.invalid_rate,
        "policy": {f"{c}{'/' + h if h else ''}": p for (c, h), p in est.policy.items()},
    }


def evaluate_games(
    generate_texts: Callable[[list[str]], Sequence[str]],
    games: Sequence[str],
    n_games: int,
    opponents: dict[str, Policy] | None = None,
    *,
    exploit_samples: int = 0,
    seed: int = 0,
    kuhn_rules: str = "standard",
    max_turns: int | None = None,
    prompt: Callable = render_prompt,
    parse_options: dict | None = None,
) -> dict[str, float]:
    """Flat metrics ``eval/{game}/vs_{opponent}/{name}`` and ``eval/kuhn_poker/exploitability``;
    ``opponents`` default: uniform random (seeded)."""
    opponents = opponents or {"random": RandomPolicy(seed)}
    policy = text_policy(generate_texts)
    out: dict[str, float] = {}
    for game in games:
        for name, opp in opponents.items():
            if n_games:
                res = play_match(
                    policy,
                    opp,
                    game,
                    n_games,
                    seed=seed,
                    kuhn_rules=kuhn_rules,
                    max_turns=max_turns,
                    prompt=prompt,
                    parse_options=parse_options,
                )
                out.update({f"eval/{game}/vs_{name}/{k}": v for k, v in res.items()})
        if game == "kuhn_poker" and exploit_samples:
            res = kuhn_exploitability(
                generate_texts, exploit_samples, rules=kuhn_rules, prompt=prompt, parse_options=parse_options
            )
            out.update({f"eval/kuhn_poker/{k}": v for k, v in res.items() if k != "policy"})
    return out


def chat_generate(generator, tokenizer, sampling, system_prompt: str = "") -> Callable[[list[str]], list]:
    """prompts -> one completion each, through the chat template (the completions have ``.text``)."""

    def generate(prompts: list[str]) -> list:
        chats = [user_ids(tokenizer, p, system_prompt) for p in prompts]  # text stays text (serl.models.chat)
        return [g[0] for g in generator.generate(chats, 1, sampling)]

    return generate


def texts(generate: Callable[[list[str]], list]) -> Callable[[list[str]], list[str]]:
    return lambda prompts: [c.text for c in generate(prompts)]


# ---- serl eval --games ---------------------------------------------------------------------------
def add_arguments(p) -> None:
    """The game options of ``serl eval`` (the model, sampling, seed and output options are shared)."""
    p.add_argument("--games", default="", help="game evaluation: comma-separated games (e.g. kuhn_poker,tictactoe)")
    p.add_argument("--n_games", type=int, default=400, help="games: games per game and opponent, seats alternated")
    p.add_argument(
        "--opponents",
        default="random",
        help="games: comma-separated opponents: random and/or paths of snapshots or model directories",
    )
    p.add_argument(
        "--exploit_samples",
        type=int,
        default=50,
        help="games: samples per Kuhn Poker info state for the exploitability (0 = skip)",
    )
    p.add_argument("--kuhn_rules", default="standard", choices=("standard", "spiral"), help="games: Kuhn payoffs")
    p.add_argument(
        "--action_parser",
        default="strict",
        choices=PARSERS,
        help="games: how a response becomes a move (see serl train --recipe spiral --help)",
    )


def cli_run(args) -> int:
    """``serl eval --games``: bad input exits 2 before the model loads."""
    from serl.engines.base import Sampling

    try:
        games = check_game_names(args.games)
    except ValueError as e:
        print(f"serl eval: error: --games: {e}", file=sys.stderr)
        return 2
    opp_paths: dict[str, str] = {}
    for name in [o.strip() for o in args.opponents.split(",") if o.strip()]:
        if name != "random":
            if not Path(name).exists():
                print(f"serl eval: error: --opponents: snapshot path {name!r} does not exist", file=sys.stderr)
                return 2
            opp_paths[f"fixed{len(opp_paths) or ''}"] = name
    if args.n_games < 0 or args.exploit_samples < 0:
        print("serl eval: error: --n_games / --exploit_samples must be >= 0", file=sys.stderr)
        return 2
    from serl.eval.shared import make_generator, write_atomic
    from serl.models.resolve import load_tokenizer, resolve_model
    from serl.recipes.spiral.snapshots import CURRENT, WeightSwitcher, load_snapshot

    model_path = resolve_model(args.model)
    tok = load_tokenizer(model_path)
    t0 = time.time()
    kind, gen = make_generator(args.generator, model_path, tok, args)
    try:
        sampling = Sampling(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p)
        own = load_snapshot(model_path) if opp_paths else {}
        switch = WeightSwitcher(gen, lambda: own.items())
        base = chat_generate(gen, tok, sampling)

        def served(key):
            def generate(prompts):
                switch.use(key)
                return base(prompts)

            return generate

        opponents: dict[str, Any] = {"random": RandomPolicy(args.seed)} if "random" in args.opponents.split(",") else {}
        opponents.update({n: text_policy(served(p)) for n, p in opp_paths.items()})
        metrics = evaluate_games(
            texts(served(CURRENT)),
            games,
            args.n_games,
            opponents,
            exploit_samples=args.exploit_samples,
            seed=args.seed,
            kuhn_rules=args.kuhn_rules,
            parse_options=parser_options(args.action_parser),
        )
    finally:
        gen.close()
    results = {
        "model": args.model,
        "generator": kind,
        "games": games,
        "opponents": args.opponents,
        "n_games": args.n_games,
        "exploit_samples": args.exploit_samples,
        "temperature": args.temperature,
        "max_new_tokens": args.max_new_tokens,
        "seed": args.seed,
        "metrics": metrics,
        "wall_seconds": round(time.time() - t0, 1),
    }
    out = Path(args.output_dir)
    write_atomic(out / "games.json", json.dumps(results, indent=2) + "\n")
    table = format_table(metrics)
    write_atomic(out / "games.txt", table + "\n")
    print(table)
    return 0


def format_table(metrics: dict[str, float]) -> str:
    rows = sorted({k.rsplit("/", 1)[0] for k in metrics if "/vs_" in k})
    lines = [f"{'game / opponent':<34}{'win rate [95% CI]':>24}{'payoff [95% CI]':>26}{'invalid':>9}"]
    for r in rows:
        g = lambda k, r=r: metrics[f"{r}/{k}"]  # noqa: E731
        lines.append(
            f"{r.removeprefix('eval/'):<34}{g('win_rate'):>7.3f} [{g('win_lo'):.3f}, {g('win_hi'):.3f}]"
            f"{g('payoff'):>10.3f} [{g('payoff_lo'):+.3f}, {g('payoff_hi'):+.3f}]{g('invalid_rate'):>9.3f}"
        )
    if "eval/kuhn_poker/exploitability" in metrics:
        lines.append(
            f"kuhn_poker exploitability {metrics['eval/kuhn_poker/exploitability']:.3f} chips/hand "
            f"(uniform random 0.458, equilibrium 0); invalid rate at the info states "
            f"{metrics['eval/kuhn_poker/invalid_rate']:.3f}"
        )
    return "\n".join(lines)
