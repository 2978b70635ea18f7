"""The SPIRAL recipe's step on stand-in engines (no model): batches, seats, population, resume state."""

import random
import re

import pytest
import torch

from serl.config.parser import parse_args
from serl.engines.base import Completion, TrainBatch
from serl.recipes.spiral.recipe import SpiralRecipe
from serl.recipes.spiral.snapshots import CURRENT, load_snapshot
from serl.run import state as run_state
from serl.run.context import RunContext
from serl.run.resume import run_defining

LEGAL = re.compile(r"Legal actions: (.*)")


class FakeTok:
    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False):
        return "<user>" + messages[0]["content"]

    def __call__(self, text, add_special_tokens=False, split_special_tokens=False):
        return {"input_ids": [ord(ch) for ch in text]}  # characters as ids: prompts decode exactly


class FakeGenerator:
    """Answers with a random legal move in a box; every ``truncate_every``-th answer is cut off."""

    def __init__(self, seed=0, truncate_every=0, illegal=False):
        self.rng, self.calls, self.loads, self.n = random.Random(seed), 0, [], 0
        self.truncate_every, self.illegal = truncate_every, illegal
        self.weights = {"w": torch.zeros(2)}

    def generate(self, prompts, n, sampling):
        self.calls += 1
        out = []
        for p in prompts:
            p = "".join(map(chr, p))  # prompts arrive as ids
            self.n += 1
            legal = LEGAL.search(p).group(1).split(", ")
            move = "nonsense" if self.illegal else self.rng.choice(legal).strip("[]")
            cut = bool(self.truncate_every) and self.n % self.truncate_every == 0
            out.append([Completion(f"\\boxed{{{move}}}", [1, 2, 3], [7, 8], "length" if cut else "stop")])
        return out

    def load_weights(self, named):
        self.weights = {k: v.clone() for k, v in named}
        self.loads.append(float(self.weights["w"][0]))

    def close(self):
        pass


class FakeLearner:
    def __init__(self):
        self.w, self.batches = torch.zeros(2), []

    def named_weights(self):
        yield "w", self.w

    def step(self, batch):
        self.batches.append(batch)
        self.w += 1.0  # each update moves the policy: snapshots differ
        return {"loss/policy": 0.0}


def make(tmp_path, *flags, gen=None):
    cfg, _ = parse_args(["--recipe", "spiral", "--run_dir", str(tmp_path), *flags])
    gen, learner = gen or FakeGenerator(), FakeLearner()
    ctx = RunContext(cfg, tmp_path, "m", FakeTok(), gen, learner, None, None)
    return SpiralRecipe(ctx, cfg.game_list()), gen, learner


def test_self_play_batch_has_one_sample_per_learner_turn(tmp_path):
    recipe, gen, learner = make(
        tmp_path, "--games", "kuhn_poker", "--games_per_step", "4", "--filter_zero_adv", "false"
    )
    m = recipe.step(1)
    (batch,) = learner.batches
    # self-play: every move is the learner's, each of a Kuhn hand's 2 or 3 moves is a sample
    assert m["train/samples"] == m["spiral/learner_turns"] == len(batch.response_ids)
    assert 8 <= len(batch.response_ids) <= 12
    # RAE with fresh baselines: A = R; then b = 0.05 * mean R of the role (hand numbers)
    for role in (0, 1):
        won = m[f"spiral/kuhn_poker/role{role}/win_rate"]
        mean_r = won - (1 - won)  # +1 / -1 per hand
        assert m[f"spiral/baseline/kuhn_poker/role{role}"] == pytest.approx(0.05 * mean_r)
    assert {float(a[0]) for a in batch.advantages} <= {1.0, -1.0}
    assert all(len(a) == 3 and len(set(a.tolist())) == 1 for a in batch.advantages)
    assert m["spiral/invalid_rate"] == 0.0 and m["spiral/opponent/self"] == 1.0


def test_truncated_masked_and_zero_advantage_filtered(tmp_path):
    recipe, gen, learner = make(
        tmp_path,
        "--games",
        "tictactoe",
        "--games_per_step",
        "2",
        "--opponent",
        "random",
        gen=FakeGenerator(truncate_every=2),
    )
    m = recipe.step(1)
    assert m["train/masked_truncated"] > 0
    total = m["train/samples"] + m["train/masked_truncated"] + m["train/filtered_zero_adv"]
    assert total == m["spiral/learner_turns"]
    for b in learner.batches:
        assert all(float(a[0]) != 0.0 for a in b.advantages)


def test_invalid_moves_end_games_with_the_penalty(tmp_path):
    recipe, gen, learner = make(
        tmp_path,
        "--games",
        "tictactoe",
        "--games_per_step",
        "2",
        "--rae",
        "false",
        "--filter_zero_adv",
        "false",
        gen=FakeGenerator(illegal=True),
    )
    m = recipe.step(1)
    # self-play: seat 0 moves first and is invalid at once: R0 = -1.5, R1 = +0.5 -> batch baseline -0.5
    assert m["spiral/invalid_rate"] == 1.0 and m["spiral/tictactoe/role0/loss_rate"] == 1.0
    (batch,) = learner.batches
    assert sorted(float(a[0]) for a in batch.advantages) == [-1.0, -1.0]


def test_seats_alternate_per_game_type(tmp_path):
    recipe, *_ = make(tmp_path, "--games", "kuhn_poker,tictactoe", "--games_per_step", "8", "--opponent", "random")
    games, seats, policies, kinds = recipe.deal(1)
    names = [g.name for g in games]
    for name in ("kuhn_poker", "tictactoe"):
        mine = [s.index(CURRENT) for n, s in zip(names, seats) if n == name]
        assert mine == [0, 1, 0, 1]
    assert set(policies) == {CURRENT, "random"} and set(kinds) == {"random"}


def test_population_snapshots_switching_and_eviction(tmp_path):
    recipe, gen, learner = make(
        tmp_path,
        "--games",
        "kuhn_poker",
        "--games_per_step",
        "6",
        "--opponent",
        "population",
        "--population_size",
        "2",
        "--population_every",
        "1",
    )
    m1 = recipe.step(1)
    assert m1["spiral/opponent/self"] == 1.0 and m1["spiral/snapshot_loads"] == 0  # no snapshot yet
    snap1 = tmp_path / "snapshots/step_000001.safetensors"
    assert load_snapshot(snap1)["w"].dtype == torch.bfloat16
    assert float(load_snapshot(snap1)["w"][0]) == 1.0  # the weights after step 1's update
    gen.loads.clear()
    m2 = recipe.step(2)
    assert m2["spiral/opponent/snapshot"] > 0 and m2["spiral/population/size"] == 2
    assert m2["spiral/snapshot_reads"] == 1  # read once, however many rounds it played
    # the generator alternated between the snapshot (1.0) and the current policy (1.0 before
    # the update), and serves the updated policy (2.0) at the end
    assert 1.0 in gen.loads and gen.loads[-1] == 2.0
    # step 2 evicted step 1's snapshot; it stays until a checkpoint at step >= 2 exists
    assert list(recipe.population.pool.snapshots) == ["snapshots/step_000002.safetensors"] and snap1.exists()
    state = recipe.state_dict()
    (tmp_path / "checkpoints/step_000002").mkdir(parents=True)
    (tmp_path / "checkpoints/step_000002/COMPLETE").write_text("")
    recipe.population.empty_trash()
    assert not snap1.exists() and recipe.population.trash.items == []

    other, *_ = make(
        tmp_path,
        "--games",
        "kuhn_poker",
        "--games_per_step",
        "6",
        "--opponent",
        "population",
        "--population_size",
        "2",
        "--population_every",
        "1",
    )
    other.load_state_dict(state)
    assert other.population.pool.snapshots == recipe.population.pool.snapshots
    assert other.baselines.values == recipe.baselines.values
    assert other.population.pool.sample(5) == recipe.population.pool.sample(5)
    (tmp_path / "snapshots/step_000002.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="step_000002"):
        other.load_state_dict(state)


def test_learner_settings_reach_the_learner_config():
    from serl.config.plan import plan_run
    from serl.engines.factory import learner_config

    cfg, _ = parse_args(["--recipe", "spiral", "--steps", "6", "--generate_max_len", "96", "--device", "cpu"])
    lc = learner_config(cfg, plan_run(cfg))
    assert (lc.ppo_epochs, lc.loss_agg, lc.loss_agg_const, lc.total_steps) == (2, "seq_sum_const", 96.0, 12)
    assert lc.kl_loss_coef == 0.0 and lc.actor_learning_rate == 1e-6


class CallSeededGenerator(FakeGenerator):
    """Its moves depend only on how many calls it has answered, as the real generators' sampling seeds do."""

    def generate(self, prompts, n, sampling):
        self.rng = random.Random(self.calls)
        return super().generate(prompts, n, sampling)


@pytest.mark.parametrize(
    "extra", [[], ["--filter_draw", "--max_turns", "3", "--fsp_start_from", "1", "--turn_discount", "0.5"]]
)
def test_a_resumed_step_equals_the_uninterrupted_one(tmp_path, extra):
    flags = [
        "--games",
        "kuhn_poker,tictactoe",
        "--games_per_step",
        "6",
        "--opponent",
        "population",
        "--population_size",
        "3",
        "--population_every",
        "1",
        "--rae_alpha",
        "0.5",
        *extra,
    ]
    straight, *_ = make(tmp_path / "a", *flags, gen=CallSeededGenerator())
    expected = [straight.step(1), straight.step(2), straight.step(3)]
    first, _, learner = make(tmp_path / "b", *flags, gen=CallSeededGenerator())
    got = [first.step(1)]
    resumed, _, other = make(tmp_path / "b", *flags, gen=CallSeededGenerator())
    other.w = learner.w.clone()  # what the learner's checkpoint restores
    run_state.restore(resumed, run_state.capture(first, 1))
    got += [resumed.step(2), resumed.step(3)]
    untimed = lambda ms: [{k: v for k, v in m.items() if not k.startswith("time/")} for m in ms]  # noqa: E731
    assert untimed(got) == untimed(expected)
    assert expected[2]["spiral/opponent/snapshot"] > 0  # the population took part
    assert resumed.state_dict()["pool"] == straight.state_dict()["pool"]
    assert resumed.baselines.values == straight.baselines.values


class LegalTwice(FakeGenerator):
    """Plays the first legal cell while 8 or more are free, then answers nonsense: in TicTacToe
    seat 0 moves, seat 1 moves, and seat 0's second move is invalid."""

    def generate(self, prompts, n, sampling):
        self.calls += 1
        out = []
        for p in prompts:
            legal = LEGAL.search("".join(map(chr, p))).group(1).split(", ")
            move = legal[0].strip("[]") if len(legal) >= 8 else "nonsense"
            out.append([Completion(f"\\boxed{{{move}}}", [1, 2, 3], [7, 8], "stop")])
        return out


def test_invalid_move_shaping_rae_and_turn_discount_by_hand(tmp_path):
    # spiral-rl's shaping: the offender -1.5, the other +0.5 (spiral/tinker/training/env.py)
    recipe, gen, learner = make(
        tmp_path, "--games", "tictactoe", "--games_per_step", "1", "--turn_discount", "0.5", gen=LegalTwice()
    )
    m = recipe.step(1)
    assert isinstance(learner.batches[0], TrainBatch)  # the runner's batch type (serl/run/step.py)
    # R = (-1.5, 0.5); fresh baselines: A0 = -1.5, A1 = 0.5; seat 0's first turn has one more after it
    assert [a.tolist() for a in learner.batches[0].advantages] == [[-0.75] * 3, [0.5] * 3, [-1.5] * 3]
    assert m["spiral/baseline/tictactoe/role0"] == pytest.approx(0.05 * -1.5)  # -0.075
    assert m["spiral/baseline/tictactoe/role1"] == pytest.approx(0.05 * 0.5)  # 0.025
    m = recipe.step(2)  # A0 = -1.5 + 0.075 = -1.425, A1 = 0.5 - 0.025 = 0.475
    assert [float(a[0]) for a in learner.batches[1].advantages] == pytest.approx([-0.7125, 0.475, -1.425])
    assert m["spiral/baseline/tictactoe/role0"] == pytest.approx(0.95 * -0.075 + 0.05 * -1.5)


def test_filter_draw_replays_drawn_games(tmp_path):
    flags = ["--games", "tictactoe", "--games_per_step", "2", "--max_turns", "2", "--filter_zero_adv", "false"]
    recipe, gen, learner = make(tmp_path / "a", *flags, "--filter_draw", "--max_draw_retries", "2")
    m = recipe.step(1)
    # every game is cut at 2 moves (a draw): each is replayed twice, then its draw stands
    assert m["spiral/draw_replays"] == 4 and gen.calls == 2 * 3  # one call per round, 2 rounds per play
    assert m["spiral/learner_turns"] == 4 and m["spiral/tictactoe/role0/draw_rate"] == 1.0
    recipe, gen, learner = make(tmp_path / "b", *flags)
    m = recipe.step(1)
    assert "spiral/draw_replays" not in m and gen.calls == 2


def test_fsp_start_from_keeps_self_play_until_the_population_starts(tmp_path):
    recipe, gen, learner = make(
        tmp_path,
        "--games",
        "kuhn_poker",
        "--games_per_step",
        "8",
        "--opponent",
        "population",
        "--population_size",
        "3",
        "--population_every",
        "1",
        "--fsp_start_from",
        "2",
    )
    m1, m2, m3 = recipe.step(1), recipe.step(2), recipe.step(3)
    assert m1["spiral/opponent/self"] == m2["spiral/opponent/self"] == 1.0  # 0 and 1 steps trained: < 2
    assert m1["spiral/population/size"] == 1 and m2["spiral/population/size"] == 2  # first snapshot: step 2
    assert (
        m3["spiral/opponent/snapshot"] > 0
        and recipe.population.pool.snapshots[0] == "snapshots/step_000002.safetensors"
    )


def test_nim_trains_beside_a_spiral_game(tmp_path):
    recipe, gen, learner = make(
        tmp_path, "--games", "nim,kuhn_poker", "--games_per_step", "4", "--filter_zero_adv", "false"
    )
    m = recipe.step(1)
    for role in (0, 1):  # Nim always has a winner: the player who took the last stone
        assert m[f"spiral/nim/role{role}/draw_rate"] == 0.0
        assert m[f"spiral/nim/role{role}/win_rate"] + m[f"spiral/nim/role{role}/loss_rate"] == 1.0
    assert m["spiral/invalid_rate"] == 0.0 and m["train/samples"] == m["spiral/learner_turns"]


def test_async_train_logs_what_the_synchronous_run_logs(tmp_path):
    """--async_train on stand-in engines whose moves do not depend on the weights: every step trains
    the same batch and logs the same metrics as the synchronous run, though collect(t+1) runs before
    after_update(t) (which reads collect(t)'s snapshot counts and RAE baselines: its step-local state)."""
    from types import SimpleNamespace

    from serl.config.plan import plan_run
    from serl.run.async_frame import wrap_engines
    from serl.run.loop import Loop

    flags = ["--games", "kuhn_poker,tictactoe", "--games_per_step", "6", "--rae_alpha", "0.5", "--steps", "3"]
    sync, _, sync_learner = make(tmp_path / "a", *flags, gen=CallSeededGenerator())
    want = [sync.step(s) for s in (1, 2, 3)]
    cfg, _ = parse_args(["--recipe", "spiral", "--run_dir", str(tmp_path / "b"), *flags, "--async_train"])
    plan, learner = plan_run(cfg), FakeLearner()
    engines = wrap_engines(cfg, plan, SimpleNamespace(generator=CallSeededGenerator(), learner=learner, checker=None))
    recipe = SpiralRecipe(
        RunContext(cfg, tmp_path / "b", "m", FakeTok(), engines.generator, engines.learner, None, None), cfg.game_list()
    )
    loop = Loop(cfg, plan, engines, recipe)
    got = [loop.train(s) for s in (1, 2, 3)]
    assert [m["async/lag_max"] for m in got] == [0.0, 1.0, 1.0]
    plain = lambda ms: [{k: v for k, v in m.items() if not k.startswith(("time/", "async/"))} for m in ms]  # noqa: E731
    assert plain(got) == plain(want)
    assert want[2]["spiral/baseline/tictactoe/role0"] != want[1]["spiral/baseline/tictactoe/role0"]  # they moved
    adv = lambda ls: [[a.tolist() for a in b.advantages] for b in ls.batches]  # noqa: E731
    assert adv(learner) == adv(sync_learner)


class RecordingGenerator(FakeGenerator):
    """FakeGenerator that keeps the sampling settings of every call."""

    def __init__(self):
        super().__init__()
        self.samplings = []

    def generate(self, prompts, n, sampling):
        self.samplings.append(sampling)
        return super().generate(prompts, n, sampling)


def test_evaluate_plays_its_own_games_with_its_own_sampling(tmp_path):
    """spiral-rl's --eval_env_ids / --eval_temperature / --eval_top_p / --eval_generate_max_length reach
    the evaluation (serl: --eval_game_names, --eval_temperature, --eval_top_p, --eval_generate_max_len)."""
    train = ["--games", "kuhn_poker", "--temperature", "1.0", "--top_p", "1.0", "--generate_max_len", "64"]
    gen = RecordingGenerator()
    recipe, *_ = make(
        tmp_path / "a",
        *train,
        "--eval_games",
        "2",
        "--eval_game_names",
        "TicTacToe-v0",
        "--eval_temperature",
        "0.6",
        "--eval_top_p",
        "0.95",
        "--eval_generate_max_len",
        "32",
        gen=gen,
    )
    games = SpiralRecipe.eval_set(recipe.cfg)
    assert games == ["tictactoe"]  # the TextArena id, read as serl's name; not the training game
    out = recipe.evaluate(games)
    assert "eval/tictactoe/vs_random/win_rate" in out and not any("kuhn_poker" in k for k in out)
    assert gen.samplings and {(s.temperature, s.top_p, s.max_new_tokens, s.seed) for s in gen.samplings} == {
        (0.6, 0.95, 32, 43)
    }
    # not given: the training sampling, as before these options existed; training itself keeps it
    gen = RecordingGenerator()
    recipe, *_ = make(tmp_path / "b", *train, "--eval_games", "2", gen=gen)
    assert SpiralRecipe.eval_set(recipe.cfg) == ["kuhn_poker"]
    recipe.evaluate(["kuhn_poker"])
    recipe.step(1)
    assert {(s.temperature, s.top_p, s.max_new_tokens) for s in gen.samplings} == {(1.0, 1.0, 64)}
    # evaluation-only: a resume may change them
    assert not {"eval_game_names", "eval_temperature", "eval_top_p", "eval_generate_max_len"} & set(
        run_defining("spiral")
    )


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--eval_game_names", "tictactoe"], "eval_game_names: .* --eval_games is 0"),
        (["--eval_games", "2", "--eval_game_names", "Chess-v0"], "eval_game_names: unknown game 'Chess-v0'"),
        (["--eval_temperature", "-0.5"], "eval_temperature: must be >= 0, or -1"),
        (["--eval_top_p", "0"], r"eval_top_p: must be in \(0, 1\]"),
        (["--generate_max_len", "64", "--eval_generate_max_len", "128"], "eval_generate_max_len: must be in"),
    ],
)
def test_eval_options_refused_values(flags, message):
    from serl import ConfigError

    with pytest.raises(ConfigError, match=message):
        parse_args(["--recipe", "spiral", *flags])
