"""spiral-rl's ``run.sh`` flags (its ``SelfPlayArgs`` and OAT's ``oat/args.py``) in serl's terms.

``serl.config.compat.rewrite`` hands every flag named in ``NAMES`` here when the recipe is SPIRAL. Each one
is, with upstream's source as the evidence (table in docs/compat.md, "SPIRAL"):

* mapped to serl's option: ``--eval_env_ids`` -> ``--eval_game_names``, ``--max_train`` -> ``--steps``
  (OAT's own stopping rule, below), ``--lr_scheduler constant``, ``--fixed_opponent random``;
* accepted at the one value serl's behaviour equals (``--num_samples 1``, the observation wrappers
  upstream itself requires per game, ...), any other value refused with the reason;
* accepted with one notice line on stderr when it only shapes OAT's throughput or debugging output
  and so has no effect in serl (``--num_envs``, ``--max_model_len``, ``--enable_prefix_caching``, ...);
* refused by name when it has no serl meaning (API opponents), never dropped.

OAT counts in "collect rounds": each of its W learner ranks takes ``--rollout_batch_size_per_device``
(P) turn samples a round, and one update uses ``--rollout_batch_size`` (R) of them, so an update comes
every U = R / (W P) rounds. It stops after the first round in which the samples seen exceed
``--max_train`` (oat/learners/base.py ``run``, ``max_queries`` = ``max_train``: oat/args.py).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

from serl import ConfigError
from serl.config.files import read_yaml
from serl.config.parser import flag_value

# OAT's defaults (oat-llm 0.1.3.post1, the version spiral-rl's README installs), where a flag is absent
OAT = {"gpus": 8, "rollout_batch_size": 128, "rollout_batch_size_per_device": 16}
# the observation spiral-rl's train_spiral.py requires per game (it asserts it): True is TextArena's
# LLMObservationWrapper (the game's whole log), False its FirstLastObservationWrapper (rules and the latest
# board). serl's prompts (serl/recipes/spiral/games/) show the moves so far, except TicTacToe's: rules and board.
FULL_LOG = {"tictactoe": False}
BOOLS = ("use_llm_obs_wrapper", "enable_prefix_caching", "use_intermediate_rewards")
NAMES = (
    "use_llm_obs_wrapper",
    "eval_env_ids",
    "eval_use_llm_obs_wrappers",
    "eval_split",
    "num_samples",
    "rollout_batch_size",
    "rollout_batch_size_per_device",
    "pi_buffer_maxlen_per_device",
    "num_envs",
    "dump_game_state_every",
    "enable_prefix_caching",
    "lr_scheduler",
    "lr_warmup_ratio",
    "max_model_len",
    "max_context_length",
    "max_train",
    "eval_steps",
    "save_steps",
    "eval_opponent_names",
    "reward_scaling",
    "use_intermediate_rewards",
    "fixed_opponent",
    "prompt_template",
    "eval_prompt_template",
    *(f"no_{b}" for b in BOOLS),
)
LAYOUT = ("rollout_batch_size", "rollout_batch_size_per_device", "max_train", "pi_buffer_maxlen_per_device")


def oat_bool(name: str, vals: list[str]) -> bool:
    """An OAT (tyro) boolean: a bare ``--flag`` is true, else one true/false word."""
    if not vals:
        return True
    v = vals[0].lower()
    if len(vals) > 1 or v not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise ConfigError(f"--{name}: expected true or false, got {' '.join(vals)!r}")
    return v in ("1", "true", "yes", "on")


def _note(flag: str, vals: list[str], why: str) -> None:
    print(f"serl: note: --{flag} {' '.join(vals)}".rstrip() + f": {why}", file=sys.stderr)


def _whole(flag: str, vals: list[str], least: int | None = 1) -> int:
    """The one whole number in ``vals`` (at least ``least`` unless None), or a ConfigError naming the flag."""
    if len(vals) != 1 or not vals[0].strip().lstrip("-").isdigit() or (least is not None and int(vals[0]) < least):
        at_least = "" if least is None else f" >= {least}"
        raise ConfigError(f"--{flag}: expected a whole number{at_least}, got {' '.join(vals) or 'no value'}")
    return int(vals[0])


def _games(vals: list[str] | None) -> list[str] | None:
    """serl's names of the games in ``vals`` (space- or comma-separated); None if absent or unknown
    (the config then names the bad game)."""
    from serl.config.registry import recipe_module

    if not vals:
        return None
    try:
        return recipe_module("spiral", "games").check_game_names([g for v in vals for g in v.split(",") if g.strip()])
    except ValueError:
        return None


def _shows(game: str) -> str:
    return "the moves so far" if FULL_LOG.get(game, True) else "the rules and the current board"


class OatFlags:
    """The spiral-rl/OAT flags of one command line (``argv`` in OAT's names, hyphens already ``_``);
    ``given(argv, name)`` reads a flag's values (``serl.config.compat._given``: None if absent)."""

    def __init__(self, argv: list[str], collocate: bool, given: Callable[[list[str], str], list[str] | None]):
        self.argv, self.collocate, self.tail = argv, collocate, list[str]()  # tail: flags that go last (they win)
        self.given = lambda name: given(argv, name)
        self.constant_lr = self.given("lr_scheduler") == ["constant"]
        self.oat_batch = any(self.given(n) is not None for n in LAYOUT)

    def _int(self, name: str) -> int:
        vals = self.given(name)
        if name == "gpus" and vals is None:
            vals = self.given("total_gpus")
        return OAT[name] if vals is None else _whole(name, vals)

    def layout(self) -> tuple[int, int, int, int]:
        """(W learner ranks, P per rank a round, R per update, U rounds per update), as OAT has them:
        with --collocate the learner has all --gpus, else the second half (oat/interface.py)."""
        gpus, p, r = self._int("gpus"), self._int("rollout_batch_size_per_device"), self._int("rollout_batch_size")
        w = gpus if self.collocate else gpus - gpus // 2
        if r % (w * p):  # OAT asserts this at start (oat/learners/base.py)
            raise ConfigError(
                f"--rollout_batch_size {r}: OAT needs a multiple of its learner GPUs ({w}) x "
                f"--rollout_batch_size_per_device ({p}) = {w * p}; it would stop at start"
            )
        return w, p, r, r // (w * p)

    def translate(self, name: str, vals: list[str]) -> list[str]:
        """serl's flags for ``--name vals`` (``[]``: accepted, nothing to pass on)."""
        if name.startswith("no_"):
            name, vals = name[3:], ["false"]
        value = " ".join(vals)
        if name == "use_llm_obs_wrapper":
            self._check_obs(name, oat_bool(name, vals), self._training_games())
            return []
        if name == "eval_env_ids":
            return ["--eval_game_names", ",".join(vals)] if vals else ["--eval_game_names"]
        if name == "eval_use_llm_obs_wrappers":
            ids = self.given("eval_env_ids")
            if not ids:
                raise ConfigError(f"--{name}: pairs one value with each game of --eval_env_ids; give both")
            games = _games(ids)
            if games is None:  # an unknown game: --eval_game_names is refused by the config, naming it
                return []
            flags = [oat_bool(name, [v]) for v in vals]
            if len(flags) != len(games):  # train_spiral.py asserts it too
                raise ConfigError(f"--{name}: {len(flags)} value(s) for {len(games)} --eval_env_ids game(s)")
            for g, on in zip(games, flags):
                self._check_obs(name, on, [g])
            return []
        if name in ("num_samples", "reward_scaling"):
            one = vals == ["1"] if name == "num_samples" else _float(name, vals) == 1.0
            if not one:
                why = (
                    "spiral-rl's actor samples one response per turn whatever it says (train_spiral.py sets "
                    "n=1), and so does serl"
                    if name == "num_samples"
                    else "spiral-rl multiplies every game outcome by it before RAE (train_spiral.py "
                    "prepare_trajectories); serl has no reward scale"
                )
                raise ConfigError(f"--{name} {value}: {why}; only 1 is accepted")
            return []
        if name == "lr_scheduler":
            if vals != ["constant"]:
                raise ConfigError(
                    f"--lr_scheduler {value}: only 'constant' has a serl equal. OAT's other schedules "
                    f"span 1e9 / --train_batch_size optimizer steps in spiral-rl (its dummy prompt "
                    f"set; oat/learners/base.py), far beyond any run; serl's cosine spans the run "
                    f"(--lr_warmup_ratio, --min_lr_ratio)"
                )
            return ["--min_lr_ratio", "1", "--lr_warmup_ratio", "0"]
        if name == "lr_warmup_ratio":  # serl's own option; only OAT's constant schedule ignores it
            if self.constant_lr and _float(name, vals) != 0:
                raise ConfigError(
                    f"--lr_warmup_ratio {value}: OAT's constant schedule has no warmup (it ignores "
                    f"this ratio), serl would warm up; give 0 or leave it out"
                )
            return [f"--{name}", *vals]
        if name == "pi_buffer_maxlen_per_device":
            w, p, r, u = self.layout()
            n = _whole(name, vals)
            if n != r // w:
                kept = (
                    f"keeps only the newest {n} of the {r // w} samples each rank collects per update"
                    if n < r // w
                    else f"also re-trains up to {n - r // w} older samples per rank (the buffer is never cleared)"
                )
                raise ConfigError(
                    f"--{name} {n}: with this layout OAT's learner {kept} (oat/learners/base.py); "
                    f"serl trains on each step's own samples, which is OAT's at {r // w}"
                )
            return []
        if name == "max_train":
            return self._steps(_whole(name, vals, 0))
        if name in ("eval_steps", "save_steps"):
            return self._interval(name, vals)
        if name == "eval_opponent_names":
            if vals != ["random"]:
                raise ConfigError(
                    f"--{name} {value}: serl's in-training evaluation plays uniform random only; "
                    f"API opponents have no serl meaning (a local snapshot: serl eval --opponents "
                    f"random,PATH after training)"
                )
            return []
        if name == "fixed_opponent":
            if value not in ("", "random"):
                raise ConfigError(
                    f"--fixed_opponent {value}: serl plays no API opponents; use --opponent random, "
                    f"fixed:PATH (a local snapshot) or population"
                )
            return ["--opponent", "random"] if value == "random" else []
        if name == "use_intermediate_rewards":
            if not oat_bool(name, vals):  # upstream then gives every turn the outcome: gamma unused
                self.tail = ["--turn_discount", "1"]
            return []
        if name in ("prompt_template", "eval_prompt_template", "eval_split"):
            return self._templates(name, vals)
        return self._no_effect(name, vals)

    def _no_effect(self, name: str, vals: list[str]) -> list[str]:
        """Flags that only shape OAT's throughput or debugging output: one notice each."""
        if name == "rollout_batch_size":
            _note(
                name,
                vals,
                f"OAT trains each update on {_whole(name, vals)} turn samples drawn from as many "
                f"games as it takes; a serl step trains on every learner turn of --games_per_step "
                f"games (set that to size the batch); serl reads it only to count OAT's updates "
                f"(--max_train, --eval_steps, --save_steps)",
            )
        elif name == "rollout_batch_size_per_device":
            _note(
                name,
                vals,
                f"the samples each OAT learner GPU takes a round ({_whole(name, vals)}); serl reads "
                f"it only to count OAT's updates (--max_train, --eval_steps, --save_steps)",
            )
        elif name == "num_envs":
            _note(
                name,
                vals,
                f"OAT actors play {_whole(name, vals)} game(s) at once; serl plays a step's games "
                f"together (lockstep), so it has no effect here",
            )
        elif name == "dump_game_state_every":
            if _whole(name, vals, None) > 0:  # 0 or less: upstream writes none either
                _note(
                    name,
                    vals,
                    "spiral-rl pickles its games for debugging; serl writes no game dumps (a "
                    "step's game metrics are in metrics.jsonl)",
                )
        elif name == "enable_prefix_caching":  # serl has no switch; either value is noted
            on = oat_bool(name, vals)
            _note(
                name,
                vals,
                (
                    "serl has no switch for it: its vLLM engines keep vLLM's default, on for models "
                    "that support it (Qwen3 does), and --generator hf has none"
                    if on
                    else "serl has no switch for it: its vLLM engines keep vLLM's default (on)"
                )
                + "; caching changes speed, not what is sampled",
            )
        elif name == "max_model_len":
            _note(
                name,
                vals,
                f"vLLM's context in OAT ({_whole(name, vals)}); serl sizes its engines' context as "
                f"--prompt_max_len + --generate_max_len",
            )
        elif name == "max_context_length":
            _whole(name, vals)
            _note(
                name,
                vals,
                "only spiral-rl's GameState.get_full_history_text reads it, and nothing calls "
                "that: no effect there either",
            )
        else:
            raise KeyError(f"compat_spiral: --{name} is in NAMES but has no rule")  # a bug, not the user's
        return []

    def _templates(self, name: str, vals: list[str]) -> list[str]:
        """Upstream's one template value each (Literal types in train_spiral.py), and its math evaluation."""
        want = {"prompt_template": "qwen3", "eval_prompt_template": "qwen3_general", "eval_split": "all"}[name]
        if vals != [want]:
            why = (
                "serl's SPIRAL runs no math evaluation, so the benchmarks it names would not be scored"
                if name == "eval_split"
                else "spiral-rl itself takes no other (SelfPlayArgs, train_spiral.py)"
            )
            raise ConfigError(f"--{name} {' '.join(vals) or 'no value'}: {why}; only {want} is accepted")
        _note(
            name,
            vals,
            {
                "prompt_template": "spiral-rl's Qwen3 wrapper of a game prompt; serl puts its own game prompt (the "
                "same form: observation, reasoning, the move in \\boxed{}) in the model's own "
                "chat template",
                "eval_prompt_template": "the template of spiral-rl's math evaluation, which serl's SPIRAL does not run",
                "eval_split": "spiral-rl's in-training evaluation also scores the math benchmarks of its --eval_data "
                "(./data); serl's SPIRAL evaluates games only (score math afterwards: serl eval)",
            }[name],
        )
        return []

    def _training_games(self) -> list[str]:
        from serl.config.registry import config_class

        for name in ("env_id", "env_ids", "games"):
            games = _games(self.given(name))
            if games:
                return games
        conf = flag_value(self.argv, "--config")  # a flat YAML file (nested ones are flags by now)
        games = _games([str(read_yaml(conf)[1].get("games") or "")]) if conf else None
        return games or _games([config_class("spiral").games]) or []  # SPIRAL's default --games

    def _check_obs(self, name: str, on: bool, games: list[str]) -> None:
        for g in games:
            if FULL_LOG.get(g, True) != on:
                need = "--use_llm_obs_wrapper" if FULL_LOG.get(g, True) else "--no-use_llm_obs_wrapper"
                raise ConfigError(
                    f"--{name}: {'true' if on else 'false'} for {g}, but serl's {g} prompt shows "
                    f"{_shows(g)} (serl/recipes/spiral/games/), which is spiral-rl's {need} (train_spiral.py "
                    f"asserts the same for its TicTacToe, Kuhn Poker and Simple Negotiation); serl "
                    f"has no other form"
                )

    def _steps(self, most: int) -> list[str]:
        """OAT's number of updates for ``--max_train most``: it stops after the first round in which the
        W P samples a round add up to more than ``most``; an update every U rounds."""
        if self.given("steps") is not None:
            raise ConfigError("--max_train: it sets --steps (OAT's number of updates); give one of them")
        w, p, r, u = self.layout()
        rounds = most // (w * p) + 1
        if rounds // u < 1:
            raise ConfigError(
                f"--max_train {most}: OAT would stop after {rounds} round(s) of {w * p} samples, "
                f"before its first update (every {u} rounds)"
            )
        return ["--steps", str(rounds // u)]

    def _interval(self, name: str, vals: list[str]) -> list[str]:
        """--eval_steps / --save_steps: serl's own options. OAT's -1 (never) saves nothing; serl's nearest
        is 0 (only at the end), noted. OAT never evaluates at 0 or less, where serl's 0 still evaluates
        before and after training: refused (a negative value always, 0 in an OAT command line). OAT counts
        rounds and acts only at an update, so with U > 1 rounds per update N rounds are every N / gcd(N, U)
        updates."""
        n = _whole(name, vals, None)
        if n < 0 and name == "save_steps":
            _note(
                name,
                vals,
                "OAT then saves nothing, not even at the end; serl's nearest is 0, which writes "
                "the final checkpoint (and the model unless --save_model false)",
            )
            return ["--save_steps", "0"]
        if name == "eval_steps" and (n < 0 or (n == 0 and self.oat_batch)):
            raise ConfigError(
                f"--eval_steps {n}: OAT then never evaluates, but serl's 0 still evaluates before "
                f"and after training; to evaluate never, leave out --eval_games (0, serl's default) "
                f"and --eval_env_ids"
            )
        if n > 0 and self.oat_batch:
            u = self.layout()[3]
            n //= math.gcd(n, u)
        return [f"--{name}", str(n)]


def _float(name: str, vals: list[str]) -> float:
    try:
        (v,) = vals
        return float(v)
    except ValueError:
        raise ConfigError(f"--{name}: expected one number, got {' '.join(vals) or 'no value'}") from None
