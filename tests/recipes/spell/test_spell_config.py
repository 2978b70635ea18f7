"""The spell recipe's options: SPELL's defaults, and bad values refused naming the option."""

import pytest

from serl import ConfigError
from serl.config.parser import parse_args


def test_defaults_follow_spell():
    cfg, _ = parse_args(["--recipe", "spell"])
    assert (cfg.n_samples_per_prompt, cfg.grounding_threshold, cfg.verifier_band, cfg.memory_capacity) == (
        8,
        0.1,
        [0.51, 0.99],
        3,
    )
    assert cfg.corpus == "dataset/docs_train.jsonl" and cfg.compact_prompts and cfg.system_prompt == ""
    assert cfg.advantage_estimator == "group_norm" and cfg.init_kl_coef == 0.0
    assert (cfg.responder_reward, cfg.verifier_warmup_steps) == ("max", 0)  # SPELL: max(rule, verifier), no warm-up
    cfg, _ = parse_args(["--recipe", "spell", "--memory_capacity", "0", "--responder_reward", "rule"])
    assert (cfg.memory_capacity, cfg.responder_reward) == (0, "rule")  # the two controls


@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--verifier_band", "0.9", "0.5"], "verifier_band"),
        (["--verifier_band", "0.5"], "verifier_band"),
        (
            ["--verifier_max_len", "200", "--questioner_max_len", "50", "--generate_max_len", "100"],
            "verifier_max_len: must be <= generate_max_len",
        ),
        (["--grounding_threshold", "0"], "grounding_threshold"),
        (["--novelty_threshold", "1.5"], "novelty_threshold"),
        (["--verifier_samples", "0"], "verifier_samples: must be >= 1"),
        (["--eval_qa_limit", "-1"], "eval_qa_limit"),
        (["--prompt_max_len", "64"], "prompt_max_len"),
        (["--memory_capacity", "-1"], "memory_capacity: must be >= 0"),
        (["--verifier_warmup_steps", "-1"], "verifier_warmup_steps: must be >= 0"),
        (["--verifier_warmup_pairs", "1"], "verifier_warmup_pairs: must be >= 2"),
        (["--verifier_warmup_samples", "1"], "verifier_warmup_samples: must be >= 2"),
    ],
)
def test_bad_values(flags, needle):
    with pytest.raises(ConfigError, match=needle):
        parse_args(["--recipe", "spell", *flags])


def test_unknown_responder_reward_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["--recipe", "spell", "--responder_reward", "mean"])
    assert e.value.code == 2 and "--responder_reward: invalid choice: 'mean'" in capsys.readouterr().err
