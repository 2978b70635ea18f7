"""The SPIN recipe's options: mode defaults, --ref_update, the iteration plan, --help."""

import pytest

from serl import ConfigError
from serl.config.options import TrainConfig
from serl.config.parser import build_parser, parse_args
from serl.config.plan import plan_run
from serl.config.registry import config_class
from serl.recipes.spin.config import iteration_steps, mixed_count, parse_ref_update
from serl.recipes.spin.recipe import SpinRecipe


def spin(*flags):
    return parse_args(["--recipe", "spin", *flags])[0]


@pytest.mark.parametrize(
    "flags,n,ref,needs_ref",
    [
        ([], 1, "iteration", False),  # SPIN: one own answer per prompt
        (["--spin_mode", "online"], 2, "steps:1", False),  # verl: n = 2, reference every step
        (["--spin_mode", "online", "--ref_update", "steps:4", "--save_steps", "4"], 2, "steps:4", True),
        (["--ref_update", "steps:3", "--n_samples_per_prompt", "2"], 2, "steps:3", False),  # spin mode caches
    ],
)
def test_mode_defaults_and_reference_rule(flags, n, ref, needs_ref):
    cfg = spin(*flags)
    assert (cfg.n_samples_per_prompt, cfg.ref_update) == (n, ref)
    spec = config_class("spin").SPEC  # the recipe's rules, read once into the plan
    assert spec.reference(cfg) is needs_ref
    plan = plan_run(cfg)  # the run's answer, which the recipe reads (self.plan)
    assert plan.needs_reference is needs_ref and plan.reference == ("learner" if needs_ref else "none")
    assert plan.ref_every == (4 if needs_ref else 0)
    assert spec.objective == plan.objective == "dpo"
    assert plan.objective_args == {"beta": 0.1, "loss_type": "sigmoid", "label_smoothing": 0.0}


def test_spin_defaults_run_on_the_shipped_data():
    cfg = spin()
    assert (cfg.prompt_data, cfg.output_key, cfg.prompt_split) == (
        "dataset/arith_spin_train.jsonl",
        "solution",
        "train",
    )
    assert (cfg.beta, cfg.dpo_loss, cfg.init_kl_coef) == (0.1, "sigmoid", 0.0)
    # the common defaults stay as they were for other recipes
    assert (TrainConfig().output_key, TrainConfig().prompt_split) == ("", "train")
    assert config_class("serl")().n_samples_per_prompt == 4


@pytest.mark.parametrize("value,n", [("iteration", 0), ("steps:1", 1), ("steps:25", 25)])
def test_parse_ref_update(value, n):
    assert parse_ref_update(value) == n


@pytest.mark.parametrize("value", ["steps:0", "steps:-1", "steps:", "steps:x", "every:3", "", "Iteration"])
def test_parse_ref_update_refuses(value):
    with pytest.raises(ConfigError, match="ref_update"):
        parse_ref_update(value)


@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--mix_previous", "1.5"], "mix_previous"),
        (["--epochs_per_iteration", "0"], "epochs_per_iteration"),
        (["--label_smoothing", "0.5"], "label_smoothing"),
        (["--spin_mode", "online", "--ref_update", "steps:3"], "save_steps"),  # save_steps 1 is no multiple of 3
        (["--spin_mode", "online", "--ref_update", "steps:2", "--save_steps", "2", "--ray"], "ref_num_gpus_per_node"),
    ],
)
def test_bad_options_name_the_option(flags, needle):
    with pytest.raises(ConfigError, match=needle):
        spin(*flags)


@pytest.mark.parametrize(
    "flags,n_problems,plan",
    [
        # 256 prompts, 1 answer, 16 pairs/step, 2 epochs: 2*16 = 32; then 256 + 256 mixed: 2*32 = 64
        (["--rollout_batch_size", "16"], 256, [32, 64, 64]),
        (["--rollout_batch_size", "16", "--mix_previous", "0"], 256, [32, 32, 32]),
        # 10 prompts x 2 answers = 20 pairs, 3 per step: ceil(20/3) = 7; then 20 + 5 = 25 -> 9; 1 epoch
        (
            [
                "--rollout_batch_size",
                "3",
                "--n_samples_per_prompt",
                "2",
                "--mix_previous",
                "0.25",
                "--epochs_per_iteration",
                "1",
            ],
            10,
            [7, 9, 9],
        ),
        (["--rollout_batch_size", "4", "--iteration_size", "6"], 1000, [4, 6, 6]),  # 6 -> 2*2; 12 -> 2*3
    ],
)
def test_iteration_plan_by_hand(flags, n_problems, plan):
    cfg = spin(*flags)
    assert [iteration_steps(cfg, n_problems, t) for t in range(3)] == plan


@pytest.mark.parametrize("mix,n,k", [(1.0, 7, 7), (0.5, 5, 3), (0.5, 4, 2), (0.0, 9, 0), (0.25, 10, 3)])
def test_mixed_count_rounds_half_up(mix, n, k):
    assert mixed_count(mix, n) == k


def test_help_lists_the_recipe_options():
    text = build_parser(config_class("spin")).format_help()
    for opt in (
        "--spin_mode",
        "--beta",
        "--dpo_loss",
        "--label_smoothing",
        "--ref_update",
        "--iteration_size",
        "--epochs_per_iteration",
        "--mix_previous",
        "--output_key",
        "--prompt_split",
    ):
        assert opt in text
    assert "options of the 'spin' recipe" in text


def test_serl_refuses_spin_options():
    with pytest.raises(SystemExit):
        parse_args(["--beta", "0.1"])


def test_prepare_reads_answers_in_spin_mode_only(tmp_path):
    data = tmp_path / "q.jsonl"
    data.write_text('{"question": "What is 2 + 2?", "answer": "Two and two.\\n#### 4"}\n')
    flags = ["--prompt_data", str(data), "--input_key", "question", "--label_key", "answer"]
    spin_probs = SpinRecipe.prepare(spin(*flags, "--output_key", "answer"))
    assert spin_probs[0].solution == "Two and two.\n\\boxed{4}" and spin_probs[0].label == "4"
    online = SpinRecipe.prepare(spin(*flags, "--spin_mode", "online", "--reward_mode", "rule"))
    assert online[0].solution is None and online[0].label == "4"  # no 'solution' key needed
