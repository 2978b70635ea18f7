"""The SPIRAL recipe's step on stand-in engines (no model): batches, seats, population, resume state."""
import random
import re

import pytest
import torch

from serl import run_state
from serl.config import parse_args
from serl.engines.base import Completion
from serl.engines.snapshots import CURRENT, load_snapshot
from serl.recipes.base import RunContext
from serl.recipes.spiral.recipe import SpiralRecipe

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
    recipe, gen, learner = make(tmp_path, "--games", "kuhn_poker", "--games_per_step", "4",
                                "--filter_zero_adv", "false")
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
    recipe, gen, learner = make(tmp_path, "--games", "tictactoe", "--games_per_step", "2",
                                "--opponent", "random", gen=FakeGenerator(truncate_every=2))
    m = recipe.step(1)
    assert m["train/masked_truncated"] > 0
    total = m["train/samples"] + m["train/masked_truncated"] + m["train/filtered_zero_adv"]
    assert total == m["spiral/learner_turns"]
    for b in learner.batches:
        assert all(float(a[0]) != 0.0 for a in b.advantages)


def test_invalid_moves_end_games_with_the_penalty(tmp_path):
    recipe, gen, learner = make(tmp_path, "--games", "tictactoe", "--games_per_step", "2", "--rae", "false",
                                "--filter_zero_adv", "false", gen=FakeGenerator(illegal=True))
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
    recipe, gen, learner = make(tmp_path, "--games", "kuhn_poker", "--games_per_step", "6", "--opponent",
                                "population", "--population_size", "2", "--population_every", "1")
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
    assert list(recipe.pool.snapshots) == ["snapshots/step_000002.safetensors"] and snap1.exists()
    state = recipe.state_dict()
    (tmp_path / "checkpoints/step_000002").mkdir(parents=True)
    (tmp_path / "checkpoints/step_000002/COMPLETE").write_text("")
    recipe.trash.empty()
    assert not snap1.exists() and recipe.trash.items == []

    other, *_ = make(tmp_path, "--games", "kuhn_poker", "--games_per_step", "6", "--opponent",
                     "population", "--population_size", "2", "--population_every", "1")
    other.load_state_dict(state)
    assert other.pool.snapshots == recipe.pool.snapshots and other.baselines.values == recipe.baselines.values
    assert other.pool.sample(5) == recipe.pool.sample(5)
    (tmp_path / "snapshots/step_000002.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="step_000002"):
        other.load_state_dict(state)


def test_learner_settings_reach_the_learner_config():
    from serl.engines.factory import learner_config
    from serl.plan import plan_run

    cfg, _ = parse_args(["--recipe", "spiral", "--steps", "6", "--generate_max_len", "96", "--device", "cpu"])
    lc = learner_config(cfg, plan_run(cfg))
    assert (lc.ppo_epochs, lc.loss_agg, lc.loss_agg_const, lc.total_steps) == (2, "seq_sum_const", 96.0, 12)
    assert lc.kl_loss_coef == 0.0 and lc.lr == 1e-6


class CallSeededGenerator(FakeGenerator):
    """Its moves depend only on how many calls it has answered, as the real generators' sampling seeds do."""

    def generate(self, prompts, n, sampling):
        self.rng = random.Random(self.calls)
        return super().generate(prompts, n, sampling)


def test_a_resumed_step_equals_the_uninterrupted_one(tmp_path):
    flags = ["--games", "kuhn_poker,tictactoe", "--games_per_step", "6", "--opponent", "population",
             "--population_size", "3", "--population_every", "1", "--rae_alpha", "0.5"]
    straight, *_ = make(tmp_path / "a", *flags, gen=CallSeededGenerator())
    expected = [straight.step(1), straight.step(2), straight.step(3)]
    first, _, learner = make(tmp_path / "b", *flags, gen=CallSeededGenerator())
    got = [first.step(1)]
    resumed, _, other = make(tmp_path / "b", *flags, gen=CallSeededGenerator())
    other.w = learner.w.clone()  # what the learner's checkpoint restores
    run_state.restore(resumed, run_state.capture(first))
    got += [resumed.step(2), resumed.step(3)]
    untimed = lambda ms: [{k: v for k, v in m.items() if not k.startswith("time/")} for m in ms]  # noqa: E731
    assert untimed(got) == untimed(expected)
    assert expected[2]["spiral/opponent/snapshot"] > 0  # the population took part
    assert resumed.state_dict()["pool"] == straight.state_dict()["pool"]
    assert resumed.baselines.values == straight.baselines.values


def test_async_train_logs_what_the_synchronous_run_logs(tmp_path):
    """--async_train on stand-in engines whose moves do not depend on the weights: every step trains
    the same batch and logs the same metrics as the synchronous run, though collect(t+1) runs before
    after_update(t) (which reads collect(t)'s snapshot counts and RAE baselines: ``step_state``)."""
    from serl.async_frame import attach_frame, wrap_engines
    from serl.plan import plan_run

    flags = ["--games", "kuhn_poker,tictactoe", "--games_per_step", "6", "--rae_alpha", "0.5", "--steps", "3"]
    sync, _, sync_learner = make(tmp_path / "a", *flags, gen=CallSeededGenerator())
    want = [sync.step(s) for s in (1, 2, 3)]
    cfg, _ = parse_args(["--recipe", "spiral", "--run_dir", str(tmp_path / "b"), *flags, "--async_train"])
    plan, learner = plan_run(cfg), FakeLearner()
    gen, gated = wrap_engines(cfg, plan, CallSeededGenerator(), learner)
    recipe = SpiralRecipe(RunContext(cfg, tmp_path / "b", "m", FakeTok(), gen, gated, None, None), cfg.game_list())
    attach_frame(recipe, plan, learner)
    got = [recipe.step(s) for s in (1, 2, 3)]
    assert [m["async/lag_max"] for m in got] == [0.0, 1.0, 1.0]
    plain = lambda ms: [{k: v for k, v in m.items() if not k.startswith(("time/", "async/"))} for m in ms]  # noqa: E731
    assert plain(got) == plain(want)
    assert want[2]["spiral/baseline/tictactoe/role0"] != want[1]["spiral/baseline/tictactoe/role0"]  # they moved
    adv = lambda ls: [[a.tolist() for a in b.advantages] for b in ls.batches]  # noqa: E731
    assert adv(learner) == adv(sync_learner)
