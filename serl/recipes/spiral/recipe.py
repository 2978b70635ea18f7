"""The SPIRAL recipe (Liu et al., 2025, "SPIRAL: Self-Play on Zero-Sum Games Incentivizes Reasoning via
Multi-Agent Multi-Turn Reinforcement Learning"; our code). ``collect`` and ``after_update`` read as the
algorithm: deal B games and their opponents, play them in lockstep, give every learner turn its episode's
role-conditioned advantage, update (PPO-clip, Dr.GRPO aggregation, E epochs, no KL), sync, and add a
snapshot to the population when one is due.

- Lockstep play (``serl.recipes.spiral.games.lockstep.play_lockstep``): each round, all moves of the learner go into one
  ``generate`` call through the chat template; each opponent snapshot gets one call for its moves.
- Opponents: ``self`` (both seats the current policy, both trained), ``random``, ``fixed:PATH`` or
  ``population`` (``serl.recipes.spiral.population``: a FIFO pool of bf16 snapshots in RUN_DIR/snapshots plus
  the current policy, drawn uniformly per game). Snapshots are served from the same generator through ``load_weights``
  (``serl.recipes.spiral.snapshots.WeightSwitcher``: loads only on a change, caches the files read in a step).
- Seats: the k-th game of each type seats the learner at k mod 2 (``--alternate_seats``).
- spiral-rl's options: ``--filter_draw`` replays drawn games on new deals (``serl.recipes.spiral.games.lockstep.replay_draws``),
  ``--fsp_start_from`` keeps self-play until the population starts, ``--turn_discount`` is its ``gamma``.
- Evaluation (``evaluate``): ``--eval_games`` games of each ``--eval_game_names`` game (default ``--games``)
  against random, sampled with ``--eval_temperature``/``--eval_top_p``/``--eval_generate_max_len`` (default:
  the training values; spiral-rl's ``--eval_*`` flags, docs/compat.md). Not run-defining.
- A response cut off by the length limit is left out of the loss (``--mask_truncated``), as is a
  sample whose advantage is exactly 0 (``--filter_zero_adv``).
- Resume: the checkpoint holds the RAE baselines and the population (snapshot paths and its RNG); RNGs and
  the generator's call count are ``serl.run.state``'s. A snapshot pushed out of the pool is deleted only
  once a complete checkpoint newer than its eviction exists, so every kept checkpoint finds its snapshots.
"""

from __future__ import annotations

import time
from collections import Counter
from functools import partial
from typing import Any

import torch

from serl.engines.base import TrainBatch
from serl.recipes.base import Recipe, masked_overlong
from serl.recipes.spiral.config import Config as SpiralConfig
from serl.recipes.spiral.evaluate import evaluate_games
from serl.recipes.spiral.games import make_game
from serl.recipes.spiral.games.actions import parser_options
from serl.recipes.spiral.games.lockstep import RandomPolicy, RewardRule, play_lockstep, replay_draws
from serl.recipes.spiral.games.prompts import render_prompt
from serl.recipes.spiral.population import Population
from serl.recipes.spiral.rae import RoleBaselines, turn_advantages
from serl.recipes.spiral.snapshots import CURRENT, WeightSwitcher
from serl.run.context import RunContext
from serl.run.step import Collected

from .stats import episode_metrics


class SpiralRecipe(Recipe):
    cfg: SpiralConfig  # its own options beside the common ones (for the type checker)

    # ---- read before anything is written ---------------------------------------------------------------
    @classmethod
    def prepare(cls, cfg):
        """The games (they need no data; the names were checked by the config). Each game's
        first prompt, with ``--system_prompt``, must fit the run's prompt budget."""
        from serl import ConfigError
        from serl.data.lengths import budget_for
        from serl.models.chat import user_ids

        budget = budget_for(cfg)
        for name in dict.fromkeys(cfg.game_list() + cls.eval_set(cfg)):  # the evaluation's games too
            game = make_game(name, kuhn_rules=cfg.kuhn_rules).reset(0)
            text = render_prompt(game, show_legal_actions=cfg.show_legal_actions, example=cfg.prompt_example)
            n = budget.measure(text, lambda t: user_ids(budget.tok, t, cfg.system_prompt or ""))
            if budget.over(n):
                raise ConfigError(
                    f"prompt_max_len: the first prompt of {name} (with --system_prompt) takes "
                    f"{budget.describe(n, text)}"
                )
        return cfg.game_list()

    @classmethod
    def eval_set(cls, cfg) -> list[str]:
        """The games evaluated against random (--eval_game_names, else --games; and Kuhn Poker for the
        exploitability)."""
        names = cfg.eval_game_list() if cfg.eval_games else []
        if cfg.exploit_samples and "kuhn_poker" not in names:
            names.append("kuhn_poker")
        return names

    # ---- the recipe's life ------------------------------------------------------------------------------
    def __init__(self, ctx: RunContext, games=None):
        super().__init__(ctx, games)
        cfg = self.cfg
        self.games = games or cfg.game_list()
        self.baselines = RoleBaselines(cfg.rae_alpha)
        self.population = (
            Population(self.run_dir, cfg.population_size, cfg.population_every, seed=cfg.seed)
            if cfg.opponent == "population"
            else None
        )
        self.fixed = str(cfg.opponent_path()) if cfg.opponent_path() else None
        self.switch = WeightSwitcher(self.generator, self.learner.named_weights)
        self.play = self.sampling()
        self.rule = RewardRule(
            invalid=cfg.invalid_penalty, invalid_opponent=cfg.invalid_opponent_reward, use_payoffs=cfg.use_payoffs
        )
        self.prompt = partial(render_prompt, show_legal_actions=cfg.show_legal_actions, example=cfg.prompt_example)
        self.parse = parser_options(cfg.action_parser)

    def collect(self, step: int) -> Collected:
        cfg = self.cfg
        loads, reads = self.switch.loads, self.switch.reads
        if self.population is not None:
            self.population.empty_trash()  # evicted snapshots no kept checkpoint needs
        games, seats, policies, kinds = self.deal(step)  # 1. games, opponents
        play: dict[str, Any] = dict(
            rule=self.rule, max_turns=cfg.max_turns or None, prompt=self.prompt, parse_options=self.parse
        )
        turns, episodes = play_lockstep(games, seats, policies, **play)  # 2. play
        retries = cfg.max_draw_retries if cfg.filter_draw else 0  # spiral-rl's draw retry
        turns, episodes, replays = replay_draws(
            turns, episodes, lambda i: self.new_game(games[i].name), retries, seats, policies, **play
        )
        self.switch.clear()
        local: dict[str, Any] = {
            "switch_counts": (self.switch.loads - loads, self.switch.reads - reads)
        }  # this collect's
        with self.timed("advantages"):  # 3. RAE
            scored = turn_advantages(turns, episodes, CURRENT, self.baselines if cfg.rae else None, cfg.turn_discount)
        local["baseline_metrics"] = {
            f"spiral/baseline/{g}/role{r}": v for (g, r), v in sorted(self.baselines.values.items())
        }
        metrics = episode_metrics(turns, episodes, kinds, CURRENT)
        if cfg.filter_draw:
            metrics["spiral/draw_replays"] = replays
        return Collected(self.make_batch(scored, metrics), metrics, local)  # 4. update, sync: the loop

    def after_update(self, step: int, metrics: dict, updated: bool, local: Any = None) -> None:
        loads, reads = self.switch.loads, self.switch.reads  # this call's own loads count too
        if updated:  # the generator serves the weights just synced
            self.switch.serving_current()
        else:
            self.switch.use(CURRENT)
        if self.population is not None and self.population.due(step) and step >= self.cfg.fsp_start_from:
            with self.timed("snapshot"):  # 5. population
                self.population.add(step, self.learner.named_weights())
        metrics["spiral/snapshot_loads"] = local["switch_counts"][0] + self.switch.loads - loads
        metrics["spiral/snapshot_reads"] = local["switch_counts"][1] + self.switch.reads - reads
        if self.population is not None:
            metrics["spiral/population/size"] = self.population.size()
        metrics.update(local["baseline_metrics"])  # as collect left them (under --async_train the next has run)

    # ---- stages ----------------------------------------------------------------------------------------
    def deal(self, step: int):
        """B new games (types cycled), the opponent and seats of each, and the policies that play."""
        cfg, n = self.cfg, self.cfg.games_per_step
        names = [self.games[i % len(self.games)] for i in range(n)]
        games = [self.new_game(g) for g in names]
        policies = {CURRENT: self.policy(CURRENT)}
        if cfg.opponent == "population" and step > cfg.fsp_start_from:  # spiral-rl: batch index >= start
            assert self.population is not None  # --opponent population makes one
            drawn = self.population.sample(n)
        else:  # the population plays only from --fsp_start_from on: self-play before
            drawn = [{"self": CURRENT, "random": "random", "population": CURRENT}.get(cfg.opponent, "fixed")] * n
        ids = []
        for entry in drawn:
            if entry in (CURRENT, "random", "fixed"):
                ids.append(entry)
            else:  # a snapshot, by its path relative to the run directory
                ids.append(entry.rsplit("/", 1)[-1].removesuffix(".safetensors"))
                policies.setdefault(ids[-1], self.policy(self.population.path(entry)))  # type: ignore[union-attr]  # drawn from it
        if "random" in ids:
            policies["random"] = RandomPolicy(self.rng.randrange(2**31))
        if "fixed" in ids:
            policies["fixed"] = self.policy(str(self.fixed))  # --opponent fixed names its path (config checks)
        seen: Counter = Counter()
        seats = []
        for g, opp in zip(names, ids):
            first = seen[g] % 2 == 0 or not cfg.alternate_seats
            seen[g] += 1
            seats.append((CURRENT, opp) if first else (opp, CURRENT))
        kinds = ["self" if i == CURRENT else i if i in ("random", "fixed") else "snapshot" for i in ids]
        return games, seats, policies, kinds

    def new_game(self, name: str):
        return make_game(name, kuhn_rules=self.cfg.kuhn_rules).reset(self.rng.randrange(2**31))

    def policy(self, key: str):
        """A lockstep policy: the current weights or a snapshot's, served by the generator."""
        stage = "generate" if key == CURRENT else "opponents"

        def play(requests):
            with self.timed("swap"):
                self.switch.use(key)
            with self.timed(stage):
                groups = self.generator.generate([self.chat_prompt(r.prompt) for r in requests], 1, self.play)
            return [g[0] for g in groups]

        return play

    def make_batch(self, scored, metrics: dict) -> TrainBatch | None:
        """One sample per learner turn with its episode's advantage; truncated and A == 0 left out."""
        cfg, rows, masked, zero = self.cfg, [], 0, 0
        for turn, adv in scored:
            c = turn.output
            if masked_overlong(c, cfg.mask_truncated):
                masked += 1
            elif cfg.filter_zero_adv and adv == 0:
                zero += 1
            elif c.token_ids:
                rows.append((c, float(adv)))
        metrics.update(
            {
                "train/samples": len(rows),
                "train/masked_truncated": masked,
                "train/filtered_zero_adv": zero,
                "train/adv_mean": sum(a for _, a in rows) / len(rows) if rows else 0.0,
                "train/adv_abs_mean": sum(abs(a) for _, a in rows) / len(rows) if rows else 0.0,
            }
        )
        if not rows:
            return None
        return TrainBatch(
            prompt_ids=[list(c.prompt_ids) for c, _ in rows],
            response_ids=[list(c.token_ids) for c, _ in rows],
            advantages=[torch.full((len(c.token_ids),), a) for c, a in rows],
        )

    def evaluate(self, games, step: int = 0) -> dict[str, float]:
        """Games against uniform random (seats alternated, fixed deals) and Kuhn exploitability, sampled
        with the evaluation's settings (--eval_temperature, --eval_top_p, --eval_generate_max_len; each
        defaults to the training value)."""
        cfg, t0 = self.cfg, time.perf_counter()
        self.switch.use(CURRENT)
        sampling = self.sampling(
            max_new_tokens=cfg.eval_generate_max_len or None,
            temperature=None if cfg.eval_temperature == -1 else cfg.eval_temperature,
            top_p=None if cfg.eval_top_p == -1 else cfg.eval_top_p,
            seed=cfg.seed + 1,
        )

        def generate(prompts):
            return [g[0].text for g in self.generator.generate([self.chat_prompt(p) for p in prompts], 1, sampling)]

        out = evaluate_games(
            generate,
            games,
            cfg.eval_games,
            exploit_samples=cfg.exploit_samples,
            seed=1_000_000 + cfg.seed,
            kuhn_rules=cfg.kuhn_rules,
            max_turns=cfg.max_turns or None,
            prompt=self.prompt,
            parse_options=self.parse,
        )
        keep = (
            "win_rate",
            "win_lo",
            "win_hi",
            "payoff",
            "payoff_lo",
            "payoff_hi",
            "invalid_rate",
            "invalid_rate_strict",
            "exploitability",
        )
        out = {k: v for k, v in out.items() if k.rsplit("/", 1)[-1] in keep}
        return out | {"time/eval": time.perf_counter() - t0}

    # ---- checkpointed state ------------------------------------------------------------------------------
    def state_dict(self) -> dict:  # keys as before the population moved to serl.engines: old runs resume
        own = self.population.state_dict() if self.population is not None else {"pool": None, "trash": []}
        return {"baselines": self.baselines.state_dict(), **own}

    def load_state_dict(self, state: dict) -> None:
        self.baselines.load_state_dict(state["baselines"])
        if self.population is not None:
            self.population.load_state_dict(state)


Recipe = SpiralRecipe  # type: ignore[misc, assignment]  # the name the registry reads
