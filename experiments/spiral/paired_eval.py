"""Games against random and against the untrained model, with every hand's outcome kept.

``serl eval --games`` and the runs' own evaluations keep aggregates only, so a change between two
models could not be paired. Here each model plays the same deals (seeded from --deal_seed, the
learner alternating seats: even hands seat 0, odd hands seat 1) and each hand's outcome is written:
the learner's seat, its payoff (chips in Kuhn Poker, +1 / -1 / 0 in TicTacToe; an invalid move
forfeits 1, as ``serl.recipes.spiral.evaluate`` scores it), win / draw / loss, and its moves, invalid moves under
the parser played and under the strict parser, and moves cut at the length limit. No model text is kept, so the files can be exported
into the repository (export.py).

Against the untrained model (``theta0``), one generator serves both sides: the model's own weights
and the base's, swapped by ``serl.recipes.spiral.snapshots.WeightSwitcher`` as the recipe swaps its
population.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import chat_completions, close, game_prompt, open_generator, write_json  # noqa: E402

DEAL_SEED = 2_000_000  # + the run seed; the runs' own evaluations use 1_000_000 + seed


def play_kept(policy, opponent, game: str, n: int, seed: int, *, kuhn_rules: str, prompt, parse) -> dict:
    """Per-hand outcomes of ``policy`` against ``opponent`` over ``n`` seeded deals."""
    from serl.recipes.spiral.evaluate import FORFEIT
    from serl.recipes.spiral.games import make_game
    from serl.recipes.spiral.games.actions import parse_action
    from serl.recipes.spiral.games.lockstep import pair_seats, play_lockstep

    games = [make_game(game, kuhn_rules=kuhn_rules).reset(seed + i) for i in range(n)]
    turns, episodes = play_lockstep(games, pair_seats(["opponent"] * n, "learner"),
                                    {"learner": policy, "opponent": opponent}, rule=FORFEIT, prompt=prompt,
                                    parse_options=parse)
    seat = [0 if ep.seats[0] == "learner" else 1 for ep in episodes]
    moves, invalid, strict_bad, cut = [0] * n, [0] * n, [0] * n, [0] * n
    for t in turns:
        if t.policy == "learner":
            moves[t.episode] += 1
            invalid[t.episode] += t.action is None
            strict_bad[t.episode] += not (t.action and parse_action(t.response, t.legal_actions).valid)
            cut[t.episode] += getattr(t.output, "finish_reason", None) == "length"  # stopped by the limit
    outcome = {"win": 1, "draw": 0, "loss": -1}
    return {"n": n, "seat": seat, "payoff": [ep.rewards[s] for ep, s in zip(episodes, seat)],
            "result": [outcome[ep.outcome(s)] for ep, s in zip(episodes, seat)],
            "moves": moves, "invalid": invalid, "invalid_strict": strict_bad, "cut": cut}


def evaluate_model(model: str, base: str, out: Path, *, games: list[str], n_games: dict[str, int],
                   against_base: bool, cfg: dict, generator: str = "auto") -> dict:
    """``out`` (JSON): {game: {"random": per-hand, "theta0": per-hand}} for ``model``; kept if it exists."""
    import json

    if out.exists():
        return json.loads(out.read_text())
    from serl.engines.base import Sampling
    from serl.models.resolve import resolve_model
    from serl.recipes.spiral.games.actions import parser_options
    from serl.recipes.spiral.games.lockstep import RandomPolicy, text_policy
    from serl.recipes.spiral.snapshots import CURRENT, WeightSwitcher, load_snapshot

    t0 = time.perf_counter()
    tok, gen = open_generator(model, generator, seed=cfg["seed"], max_model_len=1024 + cfg["generate_max_len"])
    res: dict = {"model": Path(model).name, "cfg": cfg, "games": {}}
    try:
        own = load_snapshot(resolve_model(model)) if against_base else {}
        switch = WeightSwitcher(gen, lambda: own.items())
        sampling = Sampling(cfg["generate_max_len"], cfg["temperature"], cfg["top_p"], seed=cfg["seed"] + 1)
        complete = chat_completions(gen, tok, sampling, cfg.get("system_prompt") or "")

        def served(key):
            def generate(prompts):
                switch.use(key)
                return complete(prompts)
            return text_policy(generate)

        kw = dict(kuhn_rules=cfg["kuhn_rules"], prompt=game_prompt(cfg["show_legal_actions"], cfg["prompt_example"]),
                  parse=parser_options(cfg["action_parser"]))
        seed = DEAL_SEED + cfg["seed"]
        for game in games:
            res["games"][game] = {"random": play_kept(served(CURRENT), RandomPolicy(cfg["seed"]), game,
                                                      n_games[game], seed, **kw)}
            if against_base:
                res["games"][game]["theta0"] = play_kept(served(CURRENT), served(resolve_model(base)), game,
                                                         n_games[game], seed, **kw)
            print(f"[games] {Path(model).name} {game}: {summary(res['games'][game])}", flush=True)
    finally:
        close(gen)
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    write_json(out, res)
    return res


def summary(by_opp: dict) -> dict:
    return {opp: {"payoff": round(sum(r["payoff"]) / r["n"], 3), "win": round(sum(x == 1 for x in r["result"]) / r["n"], 3),
                  "invalid": round(sum(r["invalid"]) / max(1, sum(r["moves"])), 3)} for opp, r in by_opp.items()}


# ---- statistics ------------------------------------------------------------------------------------
def rates(r: dict) -> dict:
    """Means with 95% intervals: payoff (bootstrap over hands), win rate (Wilson), invalid moves."""
    from serl.eval.stats import paired_bootstrap, wilson

    n, wins = r["n"], sum(x == 1 for x in r["result"])
    m, lo, hi = paired_bootstrap([0.0] * n, [float(x) for x in r["payoff"]])
    return {"n": n, "payoff": m, "payoff_ci": [lo, hi], "win": wins / n, "win_ci": list(wilson(wins, n)),
            "draw": sum(x == 0 for x in r["result"]) / n,
            "invalid": sum(r["invalid"]) / max(1, sum(r["moves"])),
            "invalid_strict": sum(r["invalid_strict"]) / max(1, sum(r["moves"]))}


def change(before: dict, after: dict) -> dict:
    """After minus before on the same deals and seats: paired bootstrap of payoff and win."""
    from serl.eval.stats import mcnemar_p, paired_bootstrap

    if before["seat"] != after["seat"] or before["n"] != after["n"]:
        raise ValueError("paired change needs the same deals and seats")
    p = paired_bootstrap([float(x) for x in before["payoff"]], [float(x) for x in after["payoff"]])
    wb, wa = [int(x == 1) for x in before["result"]], [int(x == 1) for x in after["result"]]
    w = paired_bootstrap([float(x) for x in wb], [float(x) for x in wa])
    return {"payoff": p[0], "payoff_ci": list(p[1:]), "win": w[0], "win_ci": list(w[1:]), "win_mcnemar_p": mcnemar_p(wb, wa)}


def kinds(before: dict, after: dict) -> dict:
    """The change split by kind, on the same deals: format (hands with an invalid move), stopping
    (moves cut at the length limit) and correctness (payoff on the hands where neither model made
    an invalid move or was cut: play judged only where both answered in form and in time)."""
    from serl.eval.stats import paired_bootstrap

    if before["seat"] != after["seat"] or "cut" not in before or "cut" not in after:
        raise ValueError("kinds of gain need the same deals and seats, with cut moves recorded")
    bad = lambda r, i: r["invalid"][i] > 0 or r["cut"][i] > 0  # noqa: E731
    clean = [i for i in range(before["n"]) if not bad(before, i) and not bad(after, i)]
    share = lambda r, key: sum(x > 0 for x in r[key]) / r["n"]  # noqa: E731
    cut = lambda r: sum(r["cut"]) / max(1, sum(r["moves"]))  # noqa: E731
    out = {"invalid_hands": [share(before, "invalid"), share(after, "invalid")],
           "cut_moves": [cut(before), cut(after)], "clean_n": len(clean)}
    if clean:
        m, lo, hi = paired_bootstrap([float(before["payoff"][i]) for i in clean],
                                     [float(after["payoff"][i]) for i in clean])
        out |= {"clean_before": sum(before["payoff"][i] for i in clean) / len(clean), "clean_change": m,
                "clean_ci": [lo, hi]}
    return out
