"""Every numeric option is checked when the command line is read: finite, in range,
one line naming the option, exit 2 and nothing written."""

import pytest

from serl import ConfigError
from serl.config.parser import parse_args


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--seed", "-1"], "seed: must lie in [0, 4294967295], got -1"),
        (["--seed", "4294967296"], "seed: must lie in [0, 4294967295]"),
        (["--actor_learning_rate", "nan"], "actor_learning_rate: must be a finite number, got nan"),
        (["--temperature", "nan"], "temperature: must be a finite number"),
        (["--temperature", "inf"], "temperature: must be a finite number, got inf"),
        (["--top_p", "2"], "top_p: must lie in (0.0, 1.0], got 2.0"),
        (["--top_p", "0"], "top_p: must lie in (0.0, 1.0]"),
        (["--max_minutes", "nan"], "max_minutes: must be a finite number"),
        (
            ["--n_samples_per_prompt", "100000000000000000000"],
            "n_samples_per_prompt: 100000000000000000000 is out of range",
        ),
        (["--n_samples_per_prompt", "100000", "--rollout_batch_size", "100000"], "sequences in one step"),
        (["--generate_max_len", "10000000"], "generate_max_len: must be at most 1048576, got 10000000"),
        (["--vllm_gpu_memory_utilization", "1.5"], "vllm_gpu_memory_utilization: must lie in (0.0, 1.0]"),
        (["--gamma", "-0.5"], "gamma: must lie in [0.0, 1.0]"),
        (["--actor_learning_rate=-1e-5"], "actor_learning_rate: must be >= 0.0, got -1e-05"),
        (["--eps_clip", "0"], "eps_clip: must be > 0.0, got 0"),
        (["--instruction_top_p", "1.5"], "instruction_top_p: must lie in (0.0, 1.0]"),  # a recipe's own option
        (["--recipe", "spiral", "--eval_top_p", "nan"], "eval_top_p: must be a finite number"),
    ],
)
def test_bad_numbers_are_refused_naming_the_option(argv, needle):
    with pytest.raises(ConfigError) as e:
        parse_args(argv)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_in_range_values_and_sentinels_pass():
    parse_args(["--seed", "0", "--temperature", "0", "--top_p", "1"])
    parse_args(["--seed", "4294967295"])
    parse_args(["--recipe", "spiral"])  # eval_temperature / eval_top_p default to -1 (= the common option)


@pytest.mark.parametrize("argv", [["--temperature", "nan"], ["--seed", "-1"], ["--top_p", "2"]])
def test_cli_prints_one_line_exits_2_and_writes_nothing(tmp_path, train_here, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    rc, err = train_here("--run_dir", str(run_dir), *argv)
    assert rc == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("serl train: error: " + argv[0][2:]), err
    assert not run_dir.exists() and list(tmp_path.iterdir()) == []
