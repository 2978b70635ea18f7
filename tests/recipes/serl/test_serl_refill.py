"""The SeRL step on stand-in engines (no model): refill rounds under a real difficulty band,
kept groups carried to the next step (and through a resume), the overlong filter, prompt_max_len
skipping, verify timeouts in the metrics.

The stand-in generator writes problem k (k = 0, 1, ... in the order asked) and answers problem k
with n equal answers when k % 3 == 0 (agreement 1: too easy for the band [0.2, 0.8]) and half
"1", half "2" otherwise (agreement 0.5: kept). So with rollout_batch_size 4, step 1's first round
rolls out k = 0..3 and keeps 1, 2; the second rolls out 4..7 and keeps 4, 5, 7: five kept, four
trained (1, 2, 4, 5), 7 carried. Step 2 starts from 7; its round rolls out 8..11 and keeps 8, 10,
11: a full batch (7, 8, 10, 11), nothing carried.
"""

import json
import re

import pytest
import torch

from serl.config.parser import parse_args
from serl.data.seeds import read_seeds
from serl.engines.base import Completion
from serl.recipes.serl.recipe import SerlRecipe
from serl.run import state as run_state
from serl.run.context import RunContext

PROBLEM = re.compile(r"(?:problem number|Seed problem) (\d+)")


_WORDS: list[str] = []  # the fake tokenizer's vocabulary, grown as it meets words


def text_of(ids) -> str:
    """A prompt's text back from the fake tokenizer's ids (prompts arrive as ids)."""
    return ids if isinstance(ids, str) else "".join(_WORDS[i] for i in ids)


class FakeTok:
    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False):
        return "<user>" + messages[0]["content"]

    def __call__(self, text, add_special_tokens=False, split_special_tokens=False):
        ids = []  # one token per word, with the whitespace after it
        for w in re.findall(r"\S+\s*|\s+", text):
            if w not in _WORDS:
                _WORDS.append(w)
            ids.append(_WORDS.index(w))
        return {"input_ids": ids}


class FakeGenerator:
    """Problems and answers as the module doc says; ``calls`` (restored on resume, as the
    real engines' call count is) is the number of problems written so far. Every
    ``long_every``-th problem is padded to 40 more words; with ``truncate_first`` the first
    answer of each group is cut off by the token limit."""

    def __init__(self, long_every=0, truncate_first=False):
        self.calls, self.long_every, self.truncate_first = 0, long_every, truncate_first
        self.rolled_out: list[int] = []

    def generate(self, prompts, n, sampling):
        out = []
        for p in map(text_of, prompts):
            if not p.startswith("<user>"):  # a few-shot prompt: write the next problem
                k, self.calls = self.calls, self.calls + 1
                pad = (
                    " with ten more words" * 10
                    if self.long_every and k % self.long_every == self.long_every - 1
                    else ""
                )
                out.append([Completion(f" Find the answer to problem number {k}{pad} please?", [1], [1])])
                continue
            k = int(PROBLEM.search(p).group(1))
            self.rolled_out.append(k)
            answers = ["1"] * n if k % 3 == 0 else ["1"] * (n // 2) + ["2"] * (n - n // 2)
            out.append(
                [
                    Completion(
                        f"so \\boxed{{{a}}}",
                        [100 + k, j],
                        [7, 8],
                        "length" if self.truncate_first and j == 0 else "stop",
                    )
                    for j, a in enumerate(answers)
                ]
            )
        return out

    def load_weights(self, named):
        list(named)


class FakeLearner:
    def __init__(self):
        self.batches = []

    def named_weights(self):
        return iter(())

    def step(self, batch):
        self.batches.append(batch)
        return {"loss/policy": 0.0}


class ExactChecker:
    """Clusters answers by exact text; each call counts one timeout, as a slow check would."""

    def __init__(self):
        self.stats = {"timeouts": 0, "check_errors": 0}

    def run_jobs(self, jobs):
        self.stats["timeouts"] += 1
        out = []
        for job in jobs:
            reps, cluster_of = [], []
            for s in job["strings"]:
                if s not in reps:
                    reps.append(s)
                cluster_of.append(reps.index(s))
            out.append({"cluster_of": cluster_of, "label_match": None})
        return out


def seeds_file(tmp_path, n=10, long_every=0):
    p = tmp_path / "seeds.jsonl"
    rows = [
        {
            "problem": f"Seed problem {i}: what is {i} plus {i}?"
            + (" and more" * 20 if long_every and i % long_every == 0 else ""),
            "answer": str(2 * i),
        }
        for i in range(n)
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


FLAGS = [
    "--rollout_batch_size",
    "4",
    "--n_samples_per_prompt",
    "4",
    "--reward_difficulty_bounds",
    "0.2",
    "0.8",
    "--max_refill_rounds",
    "3",
    "--few_shot_generation",
    "4",
    "--few_shot_generation_batch_size",
    "4",
    "--rouge_threshold",
    "1.0",
    "--init_kl_coef",
    "0",
    "--advantage_estimator",
    "group_norm",
    "--progress",
    "quiet",
    "--system_prompt",
    "Box it.",
]


def make(tmp_path, *flags, gen=None, run="run", resume_step=0, seeds=None):
    seeds = seeds or seeds_file(tmp_path)
    cfg, _ = parse_args(["--run_dir", str(tmp_path / run), "--prompt_data", str(seeds), *FLAGS, *flags])
    gen, learner = gen or FakeGenerator(), FakeLearner()
    ctx = RunContext(
        cfg,
        tmp_path / run,
        "m",
        FakeTok(),
        gen,
        learner,
        ExactChecker(),
        None,
        "quiet",
        resume_step=resume_step,
        resuming=resume_step > 0,
    )
    # the seeds as read, not fitted by prepare (whose length rule uses the real tokenizer;
    # tests/test_prompt_limits.py covers it): this file's length checks are the step's own
    return SerlRecipe(ctx, read_seeds(cfg.prompt_data, cfg.input_key, cfg.label_key)), gen, learner


def trained(batch):
    """The problems in a batch, each once (response token 0 is 100 + k)."""
    return sorted({r[0] - 100 for r in batch.response_ids})


def test_refill_rounds_fill_the_batch_and_carry_the_rest(tmp_path):
    recipe, gen, learner = make(tmp_path)
    m1 = recipe.step(1)
    assert gen.rolled_out == [0, 1, 2, 3, 4, 5, 6, 7]  # two rounds of a batch's worth each
    assert trained(learner.batches[0]) == [1, 2, 4, 5] and [r.item.text for r in recipe.carry] == [
        "Find the answer to problem number 7 please?"
    ]
    assert {
        k: m1[k]
        for k in (
            "filter/rounds",
            "batch/generated",
            "batch/rolled_out",
            "filter/difficulty/kept",
            "filter/difficulty/too_easy",
            "batch/dropped",
            "batch/carried_in",
            "batch/carried_out",
            "train/batch_prompts",
            "train/sequences",
        )
    } == {
        "filter/rounds": 2,
        "batch/generated": 8,
        "batch/rolled_out": 8,
        "filter/difficulty/kept": 5,
        "filter/difficulty/too_easy": 3,
        "batch/dropped": 3,
        "batch/carried_in": 0,
        "batch/carried_out": 1,
        "train/batch_prompts": 4,
        "train/sequences": 16,
    }
    assert m1["reward/agreement"] == pytest.approx((3 * 1.0 + 5 * 0.5) / 8)
    m2 = recipe.step(2)
    assert gen.rolled_out[8:] == [8, 9, 10, 11]
    assert trained(learner.batches[1]) == [7, 8, 10, 11] and recipe.carry == []
    assert (m2["filter/rounds"], m2["batch/rolled_out"], m2["batch/carried_in"], m2["batch/carried_out"]) == (
        1,
        4,
        1,
        0,
    )
    # the rollout's work (bench/roofline.py): 2 tokens an answer; every problem's prompt has
    # the same number of words, so step 1's 8 prompts are twice step 2's 4
    assert (m1["rollout/gen_tokens"], m2["rollout/gen_tokens"]) == (8 * 4 * 2, 4 * 4 * 2)
    assert m1["rollout/prompt_tokens"] == 2 * m2["rollout/prompt_tokens"] > 0
    # kept + carried in = trained + carried out, every step
    for m in (m1, m2):
        assert m["filter/difficulty/kept"] + m["batch/carried_in"] == m["train/batch_prompts"] + m["batch/carried_out"]
    statuses = {it.text.split()[-2]: it.status for it in recipe.pool.generated()}
    assert statuses == {str(k): "filtered" if k % 3 == 0 else "kept" for k in range(12)}


def test_a_larger_generation_round_fills_the_batch_in_one_round(tmp_path):
    """--gen_batch_size 8 with a batch of 4: step 1 writes and rolls out k = 0..7 in one round
    (one self-instruction call, one rollout call) and keeps 1, 2, 4, 5, 7; it trains 1, 2, 4, 5
    and carries 7. Step 2 starts from 7 and rolls out 8..15, keeping 8, 10, 11, 13, 14: it
    trains 7, 8, 10, 11 and carries 13, 14. Step 3 rolls out 16..23 and trains 13, 14, 16, 17."""
    recipe, gen, learner = make(tmp_path, "--gen_batch_size", "8")
    m1 = recipe.step(1)
    assert gen.rolled_out == list(range(8)) and m1["filter/rounds"] == 1
    assert trained(learner.batches[0]) == [1, 2, 4, 5] and m1["batch/carried_out"] == 1
    m2 = recipe.step(2)
    assert gen.rolled_out[8:] == list(range(8, 16)) and m2["filter/rounds"] == 1
    assert trained(learner.batches[1]) == [7, 8, 10, 11]
    assert (m2["batch/carried_in"], m2["batch/carried_out"]) == (1, 2)
    m3 = recipe.step(3)
    assert gen.rolled_out[16:] == list(range(16, 24)) and trained(learner.batches[2]) == [13, 14, 16, 17]
    for m in (m1, m2, m3):  # kept + carried in = trained + carried out, every step
        assert m["filter/difficulty/kept"] + m["batch/carried_in"] == m["train/batch_prompts"] + m["batch/carried_out"]


def test_gen_batch_size_must_not_be_negative(tmp_path):
    from serl import ConfigError

    with pytest.raises(ConfigError, match="gen_batch_size: must be >= 0"):
        make(tmp_path, "--gen_batch_size", "-1")


def test_the_carry_survives_a_resume_exactly(tmp_path):
    straight, _, learner = make(tmp_path, run="a")
    want = [straight.step(1), straight.step(2)]
    first, _, _ = make(tmp_path, run="b")
    first.step(1)
    state = run_state.capture(first, 1)  # what the checkpoint keeps
    first.close()
    resumed, gen, learner_b = make(tmp_path, run="b", resume_step=1)  # fresh engines, pool from disk
    run_state.restore(resumed, state)
    assert gen.calls == 8 and [r.item.id for r in resumed.carry] == [r.item.id for r in first.carry]
    got = resumed.step(2)
    assert trained(learner_b.batches[0]) == trained(learner.batches[1]) == [7, 8, 10, 11]
    assert {k: v for k, v in got.items() if not k.startswith("time/")} == {
        k: v for k, v in want[1].items() if not k.startswith("time/")
    }


def test_rounds_stop_at_max_refill_rounds_and_skip_the_update(tmp_path):
    recipe, gen, learner = make(tmp_path, "--reward_difficulty_bounds", "0.0", "0.4", "--max_refill_rounds", "2")
    m = recipe.step(1)  # agreement is 1 or 0.5: nothing lies in [0, 0.4]
    assert learner.batches == [] and len(gen.rolled_out) == 8
    assert (m["filter/rounds"], m["batch/dropped"], m["train/batch_prompts"], m["batch/carried_out"]) == (2, 8, 0, 0)


def test_overlong_filter_leaves_truncated_answers_out_of_the_loss(tmp_path):
    plain, _, learner_a = make(tmp_path, run="a", gen=FakeGenerator(truncate_first=True))
    masked, _, learner_b = make(tmp_path, "--overlong_filter", run="b", gen=FakeGenerator(truncate_first=True))
    ma, mb = plain.step(1), masked.step(1)
    full, cut = learner_a.batches[0], learner_b.batches[0]
    assert len(full.response_ids) == 16 and len(cut.response_ids) == 12
    assert all(r[1] != 0 for r in cut.response_ids)  # answer 0 of each group was the truncated one
    assert (ma["train/masked_truncated"], mb["train/masked_truncated"]) == (0, 4)
    assert ma["response/truncated_frac"] == mb["response/truncated_frac"] == 0.25
    # advantages come from the whole group (rewards 1, 1, 0, 0: GRPO gives +-1 / std), then the
    # truncated answer is dropped: the others keep exactly their advantages
    for row, adv in zip(cut.response_ids, cut.advantages):
        torch.testing.assert_close(adv, full.advantages[full.response_ids.index(row)])
    std = torch.tensor([1.0, 1.0, 0.0, 0.0]).std()
    assert float(cut.advantages[0][0]) == pytest.approx(0.5 / (float(std) + 1e-6), rel=1e-4)


def test_prompt_max_len_skips_long_generated_problems_and_counts_them(tmp_path):
    # every 3rd problem gets 40 more words; the chat prompt of a short one has 9 words
    # (--generate_max_len 400: the few-shot prompts, about 100 words, must fit the context)
    recipe, gen, learner = make(
        tmp_path, "--prompt_max_len", "20", "--generate_max_len", "400", gen=FakeGenerator(long_every=3)
    )
    m = recipe.step(1)
    assert all(k % 3 != 2 for k in gen.rolled_out) and m["batch/rolled_out"] == 4 * m["filter/rounds"]
    assert m["batch/skipped_long"] == m["filter/prompt_len/rejected"] >= 2
    assert all(recipe.prompt_tokens(it.text) <= 20 for it in recipe.pool.generated())


def test_prompt_max_len_skips_long_seeds_without_self_evolution(tmp_path):
    seeds = seeds_file(tmp_path, n=10, long_every=2)  # seeds 0, 2, 4, 6, 8 are long
    recipe, gen, learner = make(
        tmp_path,
        "--enable_self_evolution",
        "false",
        "--prompt_max_len",
        "20",
        "--reward_difficulty_bounds",
        "0",
        "1",
        seeds=seeds,
    )
    m = recipe.step(1)
    assert m["batch/rolled_out"] == 4 and m["batch/skipped_long"] >= 1
    assert len(gen.rolled_out) == 4 and all(k % 2 == 1 for k in gen.rolled_out)  # the short seeds
    recipe_all_long, _, _ = make(
        tmp_path, "--enable_self_evolution", "false", "--prompt_max_len", "5", run="b", seeds=seeds
    )
    from serl import DataError

    with pytest.raises(DataError, match="no seed problem fits in --prompt_max_len 5"):
        recipe_all_long.step(1)


def test_verify_timeouts_reach_the_metrics(tmp_path):
    recipe, _, _ = make(tmp_path)
    recipe.checker.stats["timeouts"] = 7  # counted before this step: not this step's
    m = recipe.step(1)
    assert (m["reward/verify_timeouts"], m["reward/verify_errors"]) == (2, 0)  # one per reward round


@pytest.mark.parametrize(
    "per_iteration,rollout,n,train_batch,steps,want",
    [
        (2000, 16, 16, 16, 100, 2000),  # SeRL's preset: 2000 * 16 / 16 optimizer steps
        (12, 4, 8, 0, 3, 3),  # one update per step: ceil(12 / 4) steps
        (10, 4, 8, 0, 50, 3),  # ceil(10 / 4) = 3 steps, then the floor LR
        (0, 4, 8, 16, 5, 10),  # 0: the schedule spans --steps (2 updates each)
    ],
)
def test_instructions_num_per_iteration_sizes_the_lr_schedule(per_iteration, rollout, n, train_batch, steps, want):
    from serl.config.plan import plan_run
    from serl.engines.factory import learner_config

    cfg, _ = parse_args(
        [
            "--instructions_num_per_iteration",
            str(per_iteration),
            "--rollout_batch_size",
            str(rollout),
            "--n_samples_per_prompt",
            str(n),
            "--train_batch_size",
            str(train_batch),
            "--steps",
            str(steps),
        ]
    )
    assert learner_config(cfg, plan_run(cfg)).total_steps == want


def test_held_out_problems_are_asked_with_the_runs_instruction(tmp_path):
    from serl.eval.data import MathProblem

    class Recorder(FakeGenerator):
        def generate(self, prompts, n, sampling):
            self.prompts = prompts
            return [[Completion("\\boxed{2}", [1], [1])] for _ in prompts]

    class Equal(ExactChecker):
        def equal_many(self, pairs):
            return [a == b for a, b in pairs]

    recipe, gen, _ = make(tmp_path, gen=Recorder())
    recipe.checker = Equal()
    m = recipe.evaluate([MathProblem("heldout", 0, "What is 1 + 1?", "2")])
    assert [text_of(p) for p in gen.prompts] == ["<user>What is 1 + 1?\nBox it."]
    assert m["eval/heldout/pass@1"] == 1.0


class CountingGenerator(FakeGenerator):
    """Also counts the generate calls that carry few-shot prompts, and their sizes."""

    def __init__(self):
        super().__init__()
        self.fewshot_calls: list[int] = []

    def generate(self, prompts, n, sampling):
        few = sum(not text_of(p).startswith("<user>") for p in prompts)
        if few:
            self.fewshot_calls.append(few)
        return super().generate(prompts, n, sampling)


@pytest.mark.parametrize("one_call, calls", [("false", [1] * 8), ("true", [5, 7])])
def test_one_call_makes_one_engine_call_a_round_and_resumes_its_yield(tmp_path, one_call, calls):
    # batch size 1 (fixed calls of 1 prompt, one problem each): 4 problems a round take 4 calls
    # (the prompt budget is 1 x 8 attempts);
    # sized: step 1 sends ceil(1.25 * 4 / 1) = 5 (the 5th problem is surplus: 4 of 5 accepted),
    # step 2 ceil(1.25 * 4 / 0.8) = 7
    gen = CountingGenerator()
    recipe, _, _ = make(
        tmp_path,
        "--few_shot_generation_batch_size",
        "1",
        "--instruction_one_call",
        one_call,
        "--max_refill_rounds",
        "1",
        "--instruction_max_attempts",
        "8",
        gen=gen,
    )
    recipe.step(1)
    recipe.step(2)
    assert gen.fewshot_calls == calls
    state = recipe.state_dict()["instruct"]
    assert state == {"prompts_sent": sum(calls), "problems_accepted": 8}
    resumed, _, _ = make(tmp_path, "--instruction_one_call", one_call, run="b")
    resumed.load_state_dict(recipe.state_dict())
    assert resumed.instruct.state_dict() == state
