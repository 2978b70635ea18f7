"""The SPIRAL recipe's own options (Liu et al., 2025, "SPIRAL: Self-Play on Zero-Sum Games Incentivizes
Reasoning via Multi-Agent Multi-Turn Reinforcement Learning"). Defaults follow the public implementation
where it names them: invalid move -1.5 / +0.5, RAE with alpha 0.95, zero-advantage samples filtered,
truncated responses masked, Dr.GRPO loss aggregation, no KL, 2 PPO epochs, a constant learning rate
of 1e-6, a population of 25 with a snapshot every 5 steps. Light to import: nothing here loads torch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from serl import ConfigError
from serl.config.options import TrainConfig, option
from serl.config.plan import RecipeSpec
from serl.recipes.spiral.games import check_game_names
from serl.recipes.spiral.games.actions import PARSERS
from serl.recipes.spiral.plots import plot_games
from serl.report.panels import Report

OPPONENT_MODES = ("self", "random", "population")  # plus "fixed:PATH"


@dataclass
class SpiralOptions:
    games: str = option(
        "kuhn_poker,tictactoe",
        "comma-separated games to train on (each step cycles "
        "through them): tictactoe, kuhn_poker, simple_negotiation, "
        "liars_dice, nim",
    )
    kuhn_rules: str = option(
        "standard",
        "Kuhn Poker payoffs: standard (bets and calls grow the pot) or spiral (upstream's fixed pot of 1 chip)",
        choices=("standard", "spiral"),
    )
    games_per_step: int = option(16, "games played per training step, split evenly over --games")
    max_turns: int = option(0, "moves after which a game is a draw (0 = each game's own limit)")
    invalid_penalty: float = option(-1.5, "reward of a player whose move is missing or illegal (ends the game)")
    invalid_opponent_reward: float = option(0.5, "reward of the other player when a move is invalid")
    filter_draw: bool = option(
        False,
        "replay a game that ends without a winner (turn limit included) on a new "
        "deal, up to --max_draw_retries times; then its draw stands (spiral-rl)",
    )
    max_draw_retries: int = option(5, "with --filter_draw: replays of a drawn game before its draw is accepted")
    use_payoffs: bool = option(
        False,
        "reward normal endings with the game's payoffs (chips in Kuhn Poker) instead of win +1 / loss -1 / draw 0",
    )
    rae: bool = option(
        True,
        "role-conditioned advantages: A = R - EMA baseline per (game, role); "
        "off = A = R - mean return of the step (the control)",
    )
    rae_alpha: float = option(0.95, "EMA decay of the RAE baselines")
    turn_discount: float = option(
        1.0,
        "spiral-rl's gamma: a learner turn followed by k more of its turns in the "
        "episode gets advantage A * turn_discount**k (1 = all turns A)",
    )
    filter_zero_adv: bool = option(True, "leave samples whose advantage is exactly 0 out of the update")
    mask_truncated: bool = option(True, "leave responses cut off by --generate_max_len out of the loss")
    opponent: str = option(
        "self",
        "who sits in the other seat: self (current policy), random (uniform "
        "legal moves), fixed:PATH (a snapshot .safetensors or HF model directory "
        "of the same architecture) or population (past snapshots + current)",
    )
    population_size: int = option(25, "population: entries drawn from, the current policy included")
    population_every: int = option(5, "population: add a snapshot of the policy every N steps")
    fsp_start_from: int = option(
        0,
        "population: self-play until this many steps have trained, then the population; no snapshot before (spiral-rl)",
    )
    alternate_seats: bool = option(
        True, "alternate the learner between seat 0 and seat 1 over the games (upstream always seats it first)"
    )
    ppo_epochs: int = option(2, "optimizer steps over each step's batch (PPO epochs)")
    show_legal_actions: bool = option(True, "list the legal actions in each prompt")
    prompt_example: bool = option(True, "show the answer format on a legal action (e.g. \\boxed{bet})")
    action_parser: str = option(
        "strict",
        "strict (upstream: the last box, or a short answer), lenient (also "
        "a box holding one legal action among other words) or mention "
        "(lenient, and without a box the legal action named last): "
        "documented deviations for small models",
        choices=PARSERS,
    )
    eval_games: int = option(
        0,
        "evaluation: games per game type against uniform random, before and after "
        "training and every --eval_steps (0 = none)",
    )
    exploit_samples: int = option(
        0, "evaluation: samples per Kuhn Poker info state for the exploitability estimate (0 = none)"
    )
    # evaluation only (not run-defining): a resume may change them; defaults are the training values
    eval_game_names: str = option("", "evaluation: comma-separated games played against random ('' = --games)")
    eval_temperature: float = option(
        -1.0, "evaluation: sampling temperature of its moves (-1 = --temperature, 0 = greedy)"
    )
    eval_top_p: float = option(-1.0, "evaluation: nucleus sampling of its moves (-1 = --top_p)")
    eval_generate_max_len: int = option(
        0,
        "evaluation: max new tokens per move (0 = --generate_max_len; at "
        "most --generate_max_len, which sizes the engine's context)",
    )


@dataclass
class Config(SpiralOptions, TrainConfig):
    """SPIRAL: self-play on zero-sum text games, role-conditioned advantages, a population of past selves."""

    RECIPE: ClassVar[str] = "spiral"
    # PPO epochs, and Dr.GRPO's aggregation: token sums over the generation limit
    SPEC: ClassVar[RecipeSpec] = RecipeSpec(
        updates_per_step=lambda cfg: cfg.ppo_epochs,
        learner=lambda cfg: {
            "ppo_epochs": cfg.ppo_epochs,
            "loss_agg": "seq_sum_const",
            "loss_agg_const": float(cfg.generate_max_len),
            "temperature": cfg.temperature if cfg.temperature > 0 else 1.0,
        },
        resume_fixed=(
            "games",
            "kuhn_rules",
            "games_per_step",
            "max_turns",
            "invalid_penalty",
            "invalid_opponent_reward",
            "use_payoffs",
            "rae",
            "rae_alpha",
            "filter_zero_adv",
            "mask_truncated",
            "opponent",
            "population_size",
            "population_every",
            "alternate_seats",
            "ppo_epochs",
            "show_legal_actions",
            "prompt_example",
            "action_parser",
            "generate_max_len",
            "temperature",
            "top_p",
            "filter_draw",
            "max_draw_retries",
            "turn_discount",
            "fsp_start_from",
        ),
    )
    # games need no seed data, no math reward or evaluation; RAE replaces the advantage options
    SECTIONS: ClassVar[tuple[str, ...]] = ("run", "generation", "kl", "learner", "lora", "ray", "async")
    REPORT: ClassVar[Report] = Report(
        plots=("reward",),
        figures=(("games", plot_games),),
        main=("spiral/invalid_rate",),
        line=(("spiral/invalid_rate", "invalid"), ("response/truncated_frac", "trunc"), ("loss/policy", "loss")),
    )
    # common options with SPIRAL's defaults (each keeps its type and place: TrainConfig.DEFAULTS)
    DEFAULTS: ClassVar[dict] = dict(
        init_kl_coef=option(0.0, "KL coefficient (SPIRAL uses none; > 0 needs --use_kl_loss)"),
        actor_learning_rate=option(1e-6, "AdamW learning rate"),
        lr_warmup_ratio=option(0.0, "share of steps spent warming up the learning rate (SPIRAL: none)"),
        min_lr_ratio=option(
            1.0, "cosine schedule floor, as a share of the learning rate (SPIRAL: 1, a constant learning rate)"
        ),
        system_prompt=option("", "instruction appended to each prompt (the game prompt has its own)"),
        prompt_data=option("", "unused by SPIRAL (games need no data)"),
    )

    def game_list(self) -> list[str]:
        try:
            return check_game_names(self.games)
        except ValueError as e:
            raise ConfigError(f"games: {e}") from None

    def eval_game_list(self) -> list[str]:
        """The games the evaluation plays: --eval_game_names, else the training games."""
        if not self.eval_game_names:
            return self.game_list()
        try:
            return check_game_names(self.eval_game_names)
        except ValueError as e:
            raise ConfigError(f"eval_game_names: {e}") from None

    def opponent_path(self) -> Path | None:
        return Path(self.opponent.split(":", 1)[1]) if self.opponent.startswith("fixed:") else None

    def validate_recipe(self) -> None:
        self.game_list()
        if self.opponent not in OPPONENT_MODES and not self.opponent.startswith("fixed:"):
            raise ConfigError(f"opponent: must be self, random, population or fixed:PATH, got {self.opponent!r}")
        path = self.opponent_path()
        if path is not None and not path.exists():
            raise ConfigError(f"opponent: snapshot path {str(path)!r} does not exist")
        if path is not None and path.is_dir() and not list(path.glob("*.safetensors")):
            raise ConfigError(f"opponent: {str(path)!r} holds no .safetensors weights")
        for name in ("population_size", "population_every", "games_per_step", "ppo_epochs"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("max_turns", "eval_games", "exploit_samples", "max_draw_retries", "fsp_start_from"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if self.fsp_start_from and self.opponent != "population":
            raise ConfigError(
                f"fsp_start_from: delays the population, but --opponent is {self.opponent!r}; "
                f"use --opponent population (spiral-rl: fsp_enabled=True)"
            )
        for name in ("rae_alpha", "turn_discount"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"{name}: must be in [0, 1], got {getattr(self, name)}")
        self._validate_eval()
        if self.exploit_samples and "kuhn_poker" not in self.game_list():
            raise ConfigError("exploit_samples: the exploitability is Kuhn Poker's; add kuhn_poker to --games")

    def _validate_eval(self) -> None:
        self.eval_game_list()
        if self.eval_game_names and not self.eval_games:
            raise ConfigError(
                f"eval_game_names: {self.eval_game_names!r} is played by the evaluation, but "
                f"--eval_games is 0 (no evaluation games); set --eval_games N"
            )
        if self.eval_temperature != -1.0 and self.eval_temperature < 0:
            raise ConfigError(f"eval_temperature: must be >= 0, or -1 for --temperature, got {self.eval_temperature}")
        if self.eval_top_p != -1.0 and not 0.0 < self.eval_top_p <= 1.0:
            raise ConfigError(f"eval_top_p: must be in (0, 1], or -1 for --top_p, got {self.eval_top_p}")
        if not 0 <= self.eval_generate_max_len <= self.generate_max_len:
            raise ConfigError(
                f"eval_generate_max_len: must be in [0, --generate_max_len = {self.generate_max_len}] "
                f"(0 = --generate_max_len; the engine's context is --prompt_max_len + "
                f"--generate_max_len), got {self.eval_generate_max_len}"
            )
