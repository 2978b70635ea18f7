"""serl.config.compat: the seeds' own names (SeRL/OpenRLHF, spiral-rl, verl) reach serl's options."""

import pytest

from serl import ConfigError, DataError
from serl.config.compat import rewrite
from serl.config.parser import parse_args
from serl.data.seeds import read_seeds
from serl.recipes.spell.difficulty import difficulty_reward
from serl.recipes.spiral.games import check_game_names


def cfg_of(*argv):
    return parse_args(rewrite(list(argv)))[0]


def test_openrlhf_flags():
    cfg = cfg_of(
        "--max_epochs",
        "1",
        "--eval_dataset",
        "dataset/arith_heldout.jsonl",
        "--save_path",
        "runs/x",
        "--ckpt_path",
        "runs/x/ckpt",
    )
    assert cfg.eval_data == "dataset/arith_heldout.jsonl" and cfg.run_dir == "runs/x"
    with pytest.raises(ConfigError, match="--max_epochs: serl trains each rollout once .* got 2"):
        rewrite(["--max_epochs", "2"])
    cfg = cfg_of("--few_shot_generation_prompt", "prompts/self_instruct_fewshot.txt")
    assert cfg.few_shot_generation_prompt.endswith("self_instruct_fewshot.txt")
    with pytest.raises(ConfigError, match="few_shot_generation_prompt: template not found"):
        cfg_of("--few_shot_generation_prompt", "no/such/template.txt")


def test_spiral_names_and_textarena_ids():
    cfg = cfg_of(
        "--recipe",
        "spiral",
        "--env_ids",
        "TicTacToe-v0",
        "KuhnPoker-v1",
        "--model_name",
        "smollm2",
        "--learning_rate",
        "2e-6",
        "--num_ppo_epochs",
        "3",
        "--fsp_enabled",
        "--beta",
        "0",
    )
    assert cfg.game_list() == ["tictactoe", "kuhn_poker"] and cfg.opponent == "population"
    assert cfg.actor_learning_rate == 2e-6 and cfg.ppo_epochs == 3 and cfg.init_kl_coef == 0
    cfg = cfg_of("--recipe", "spiral", "env_ids=SimpleNegotiation-v1,LiarsDice-v0", "fsp_enabled=false")
    assert cfg.game_list() == ["simple_negotiation", "liars_dice"] and cfg.opponent == "self"
    assert cfg_of("--recipe", "spiral", "--games", "TicTacToe-v0,KuhnPoker-v1").game_list() == [
        "tictactoe",
        "kuhn_poker",
    ]
    with pytest.raises(ValueError, match="TextArena ids: TicTacToe-v0"):
        check_game_names("Chess-v0")


def test_spiral_rl_oat_resource_checkpoint_and_wandb_names():
    """spiral-rl's scripts pass OAT's flags (oat/args.py), some with hyphens (tyro)."""
    cfg = cfg_of(
        "--recipe",
        "spiral",
        "--gpus",
        "8",
        "--collocate",
        "--vllm_sleep",
        "--vllm_gpu_ratio",
        "0.45",
        "--gradient-checkpointing",
        "--max_save_num",
        "30",
        "--train_batch_size_per_device",
        "1",
        "--use-wb",
        "--wb-run-name",
        "spiral-run",
        "--wb_project",
        "oat-self-play",
    )
    assert cfg.ray and cfg.learner == "deepspeed" and cfg.colocate_all_models
    assert (cfg.actor_num_gpus_per_node, cfg.vllm_num_engines) == (8, 8)  # collocated: all 8 for both
    assert cfg.vllm_enable_sleep and cfg.vllm_gpu_memory_utilization == 0.45 and cfg.gradient_checkpointing
    assert cfg.max_ckpt_num == 30 and cfg.micro_train_batch_size == 1
    assert cfg.use_wandb is True and cfg.wandb_run_name == "spiral-run" and cfg.wandb_project == "oat-self-play"
    # without --collocate OAT splits the GPUs: vLLM actors on the first half, the learner on the second
    cfg = cfg_of("--recipe", "spiral", "--gpus", "4", "collocate=false")
    assert (cfg.actor_num_gpus_per_node, cfg.vllm_num_engines, cfg.colocate_all_models) == (2, 2, False)
    assert not cfg_of("--recipe", "spiral", "--gpus", "1", "--collocate").ray  # one device: one process
    with pytest.raises(ConfigError, match="--gpus 3: .* even count"):
        rewrite(["--recipe", "spiral", "--gpus", "3"])
    # OAT's --rnd_seed draws the seed from the clock and wins over --seed; it is then an ordinary seed
    a = rewrite(["--recipe", "spiral", "--rnd-seed", "--seed", "7"])
    assert a[-2] == "--seed" and a[-1] != "7" and cfg_of(*a).seed == int(a[-1])
    assert cfg_of("--recipe", "spiral", "--no-rnd-seed", "--seed", "7").seed == 7
    with pytest.raises(ConfigError, match="wb_org: .*WANDB_ENTITY"):
        rewrite(["--recipe", "spiral", "--wb_org", "me"])
    with pytest.raises(SystemExit):  # another recipe: OAT's names mean nothing there, the parser refuses them
        cfg_of("--recipe", "serl", "--gpus", "8")


def test_spiral_rl_draw_fsp_and_gamma_names(tmp_path):
    cfg = cfg_of(
        "--recipe",
        "spiral",
        "--gamma",
        "0.9",
        "filter_draw=True",
        "max_draw_retries=2",
        "fsp_enabled=True",
        "fsp_start_from=3",
        "fsp_pool_size=25",
        "fsp_update_interval=4",
        "role_baseline_ema_gamma=0.9",
        "use_role_baseline=False",
    )
    assert (cfg.turn_discount, cfg.filter_draw, cfg.max_draw_retries, cfg.opponent) == (0.9, True, 2, "population")
    # spiral-rl's pool counts past snapshots only; serl's population_size counts the current policy too
    assert (cfg.fsp_start_from, cfg.population_size, cfg.population_every) == (3, 26, 4)
    assert (cfg.rae_alpha, cfg.rae) == (0.9, False)
    assert cfg_of("--recipe", "serl", "--gamma", "0.9").gamma == 0.9  # elsewhere gamma is the token discount
    y = tmp_path / "spiral.yaml"
    y.write_text("recipe: spiral\ngames: nim\n")  # the recipe named by a flat YAML file
    assert cfg_of("--config", str(y), "--gamma", "0.5").turn_discount == 0.5
    with pytest.raises(ConfigError, match="--fsp_pool_size: expected a whole number >= 1, got 0"):
        rewrite(["--recipe", "spiral", "fsp_pool_size=0"])


def test_verl_dotted_overrides_and_nested_yaml(tmp_path):
    cfg = cfg_of(
        "recipe=spin",
        "spin_mode=online",
        "algorithm.dpo_beta=0.2",
        "trainer.ref_update_freq=2",
        "trainer.save_freq=2",
        "actor_rollout_ref.actor.optim.lr=3e-7",
        "data.train_files=dataset/arith_spin_train.jsonl",
        "actor_rollout_ref.rollout.n=4",
    )
    assert (cfg.beta, cfg.ref_update, cfg.save_steps, cfg.actor_learning_rate) == (0.2, "steps:2", 2, 3e-7)
    assert cfg.prompt_data == "dataset/arith_spin_train.jsonl" and cfg.n_samples_per_prompt == 4
    with pytest.raises(ConfigError, match="'algorithm.kl_ctrl.kl_ctrl_type' has no serl meaning and is refused"):
        rewrite(["recipe=spin", "algorithm.kl_ctrl.kl_ctrl_type=fixed"])
    with pytest.raises(ConfigError, match="trainer.ref_update_freq' must be a whole number >= 1"):
        rewrite(["trainer.ref_update_freq=-1"])
    y = tmp_path / "spin.yaml"
    y.write_text(
        "recipe: spin\nsteps: 2\nalgorithm:\n  dpo_beta: 0.3\ntrainer:\n  ref_update_freq: 1\n"
        "actor_rollout_ref:\n  actor:\n    optim:\n      lr: 1.0e-6\n"
    )
    cfg = cfg_of("--config", str(y), "--steps", "5")  # the command line still overrides the file
    assert (cfg.recipe, cfg.beta, cfg.ref_update, cfg.actor_learning_rate, cfg.steps) == (
        "spin",
        0.3,
        "steps:1",
        1e-6,
        5,
    )
    y.write_text("recipe: spin\nalgorithm:\n  gamma: 1.0\n")
    with pytest.raises(ConfigError, match=r"spin.yaml: option 'algorithm.gamma'.*has no serl meaning"):
        rewrite(["--config", str(y)])


def test_verl_parquet_prompt_as_chat_messages(tmp_path):
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    rows = [
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": "Natalia sold 48 clips. How many? Let's think step by step."}],
            "reward_model": {"ground_truth": "72", "style": "rule"},
        }
    ]
    p = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), p)
    (prob,) = read_seeds(p, "prompt", "reward_model.ground_truth")
    assert prob.text.startswith("Natalia sold 48 clips") and prob.label == "72"
    pq.write_table(pa.Table.from_pylist([{"prompt": [{"role": "system", "content": "hi"}]}]), p)
    with pytest.raises(DataError, match="holds no chat message with role 'user'"):
        read_seeds(p, "prompt", None)


def test_questioner_reward_mappings():
    # r = 0.25: gaussian exp(-(0.25)^2 / (2/36)) = exp(-1.125); azr 0.75; rzero 1 - 0.5 = 0.5
    assert difficulty_reward(0.25) == pytest.approx(0.32465, abs=1e-5)
    assert difficulty_reward(0.25, mapping="azr") == 0.75
    assert difficulty_reward(0.25, mapping="rzero") == 0.5
    assert difficulty_reward(1.0, mapping="azr") == 0.0 and difficulty_reward(0.0, mapping="rzero") == 0.0
    assert cfg_of("--recipe", "spell", "--questioner_reward", "azr").questioner_reward == "azr"


# spiral-rl's run.sh (github.com/spiral-rl/spiral, HEAD a02d0ed), the `python train_spiral.py` words as written
SPIRAL_RUN_SH = """
    --env_id KuhnPoker-v1 --use_llm_obs_wrapper --eval_env_ids TicTacToe-v0 KuhnPoker-v1
    --eval_use_llm_obs_wrappers False True --eval_split all --gamma 1 --gpus 8 --gradient-checkpointing
    --num_samples 1 --rollout_batch_size 128 --dump_game_state_every 1 --num_envs 1
    --rollout_batch_size_per_device 16 --pi_buffer_maxlen_per_device 16 --pretrain Qwen/Qwen3-4B-Base
    --enable_prefix_caching --collocate --vllm_sleep --vllm_gpu_ratio 0.45 --rnd-seed --learning_rate 0.000001
    --lr_scheduler constant --lr_warmup_ratio 0 --num_ppo_epochs 2 --train_batch_size 128
    --train_batch_size_per_device 1 --beta 0 --max_model_len 12800 --generate_max_length 4096
    --max_context_length 32768 --temperature 1.0 --top_p 1 --eval_steps 16 --save_steps -1 --eval_games 16
    --eval_temperature 0.6 --eval_top_p 0.95 --eval_generate_max_length 4096 --max_train 51200 --max_save_num 30
    --use-wb --wb-run-name spiral-qwen3-4b-base-kp-4k-self-play --wb_project spiral
""".split()


def notes(capsys) -> set[str]:
    """The flags named by serl.config.compat_spiral's notice lines on stderr."""
    return {
        line.split()[2].rstrip(":")[2:]
        for line in capsys.readouterr().err.splitlines()
        if line.startswith("serl: note: --")
    }


def test_spiral_rl_run_sh_rewrites_to_serl_flags_and_parses(capsys):
    out = rewrite(["--recipe", "spiral", *SPIRAL_RUN_SH])
    assert out[:-2] == [
        "--recipe",
        "spiral",
        "--games",
        "KuhnPoker-v1",
        "--eval_game_names",
        "TicTacToe-v0,KuhnPoker-v1",
        "--turn_discount",
        "1",
        "--ray",
        "--learner",
        "deepspeed",
        "--actor_num_gpus_per_node",
        "8",
        "--vllm_num_engines",
        "8",
        "--colocate_all_models",
        "true",
        "--gradient_checkpointing",
        "--pretrain",
        "Qwen/Qwen3-4B-Base",
        "--vllm_enable_sleep",
        "--vllm_gpu_memory_utilization",
        "0.45",
        "--actor_learning_rate",
        "0.000001",
        "--min_lr_ratio",
        "1",
        "--lr_warmup_ratio",
        "0",  # --lr_scheduler constant
        "--lr_warmup_ratio",
        "0",
        "--ppo_epochs",
        "2",
        "--train_batch_size",
        "128",
        "--micro_train_batch_size",
        "1",
        "--init_kl_coef",
        "0",
        "--generate_max_len",
        "4096",
        "--temperature",
        "1.0",
        "--top_p",
        "1",
        "--eval_steps",
        "16",
        "--save_steps",
        "0",
        "--eval_games",
        "16",
        "--eval_temperature",
        "0.6",
        "--eval_top_p",
        "0.95",
        "--eval_generate_max_len",
        "4096",
        "--steps",
        "401",  # OAT: 8 ranks x 16 = 128 samples a round, one update a round, stop once > 51200: 401
        "--max_ckpt_num",
        "30",
        "--use_wandb",
        "--wandb_run_name",
        "spiral-qwen3-4b-base-kp-4k-self-play",
        "--wandb_project",
        "spiral",
    ]
    assert out[-2] == "--seed" and out[-1].isdigit()  # --rnd-seed: drawn from the clock
    assert notes(capsys) == {
        "eval_split",
        "rollout_batch_size",
        "dump_game_state_every",
        "num_envs",
        "rollout_batch_size_per_device",
        "enable_prefix_caching",
        "max_model_len",
        "max_context_length",
        "save_steps",
    }
    cfg = parse_args(out)[0]
    assert cfg.game_list() == ["kuhn_poker"] and cfg.eval_game_list() == ["tictactoe", "kuhn_poker"]
    assert (cfg.steps, cfg.eval_steps, cfg.save_steps, cfg.eval_games) == (401, 16, 0, 16)
    assert (cfg.eval_temperature, cfg.eval_top_p, cfg.eval_generate_max_len) == (0.6, 0.95, 4096)
    assert (cfg.temperature, cfg.top_p, cfg.generate_max_len) == (1.0, 1.0, 4096)
    assert (cfg.actor_learning_rate, cfg.min_lr_ratio, cfg.lr_warmup_ratio) == (1e-6, 1.0, 0.0)
    assert (cfg.ppo_epochs, cfg.train_batch_size, cfg.micro_train_batch_size, cfg.init_kl_coef) == (2, 128, 1, 0.0)
    assert (cfg.turn_discount, cfg.opponent, cfg.model) == (1.0, "self", "Qwen/Qwen3-4B-Base")
    assert cfg.ray and cfg.colocate_all_models and (cfg.actor_num_gpus_per_node, cfg.vllm_num_engines) == (8, 8)


@pytest.mark.parametrize(
    "flags, steps, eval_steps, save_steps",
    [
        # W learner ranks (--gpus with --collocate, else half; OAT's default 8 GPUs), P = 16, R = 128 unless given;
        # rounds = max_train // (W P) + 1, an update every U = R / (W P) rounds: steps = rounds // U
        (["--gpus", "8", "--collocate", "--max_train", "51200"], 401, 0, 1),  # W 8: 401 rounds, U 1
        (["--max_train", "51200"], 400, 0, 1),  # W 4: 801 rounds, U 2
        (["--gpus", "4", "--collocate", "--max_train", "51200"], 400, 0, 1),  # W 4: 801 rounds, U 2
        (["--gpus", "8", "--collocate", "--max_train", "1280", "--rollout_batch_size", "256"], 5, 0, 1),  # 11 // 2
        (["max_train=1280", "--gpus", "8", "--collocate"], 11, 0, 1),  # 1280 // 128 + 1
        # W 1: U 8, 3201 rounds; OAT acts on rounds 16, 32, ... = updates 2, 4, ...; saves on rounds 24, 48, ...
        (
            [
                "--gpus",
                "1",
                "--max_train",
                "51200",
                "--pi_buffer_maxlen_per_device",
                "128",
                "--eval_steps",
                "16",
                "--save_steps",
                "12",
            ],
            400,
            2,
            3,
        ),
        (
            ["--gpus", "8", "--collocate", "--rollout_batch_size", "128", "--eval_steps", "16", "--save_steps", "-1"],
            3,
            16,
            0,
        ),  # U 1: unchanged; -1 -> 0
    ],
)
def test_spiral_rl_max_train_counts_oat_updates(flags, steps, eval_steps, save_steps, capsys):
    cfg = cfg_of("--recipe", "spiral", *flags)
    assert (cfg.steps, cfg.eval_steps, cfg.save_steps) == (steps, eval_steps, save_steps)


def test_spiral_rl_values_serl_already_has(capsys):
    assert cfg_of("--recipe", "spiral", "--fixed_opponent", "random").opponent == "random"
    assert cfg_of("--recipe", "spiral", "--fixed_opponent", "").opponent == "self"
    # use_intermediate_rewards=False gives every turn the outcome, whatever gamma says
    assert cfg_of("--recipe", "spiral", "use_intermediate_rewards=False", "--gamma", "0.9").turn_discount == 1.0
    assert cfg_of("--recipe", "spiral", "--use_intermediate_rewards", "--gamma", "0.9").turn_discount == 0.9
    cfg = cfg_of(
        "--recipe",
        "spiral",
        "--env_id",
        "TicTacToe-v0",
        "--no-use-llm-obs-wrapper",
        "--num_samples",
        "1",
        "--reward_scaling",
        "1.0",
        "--eval_opponent_names",
        "random",
        "--dump_game_state_every",
        "0",
        "--eval_env_ids",
        "SimpleNegotiation-v1",
        "LiarsDice-v0",
        "--eval_use_llm_obs_wrappers",
        "True",
        "True",
        "--eval_games",
        "4",
    )
    assert cfg.game_list() == ["tictactoe"] and cfg.eval_game_list() == ["simple_negotiation", "liars_dice"]
    assert notes(capsys) == set()  # values serl's behaviour equals: nothing to note
    cfg_of(
        "--recipe",
        "spiral",
        "--no-enable-prefix-caching",
        "--prompt_template",
        "qwen3",
        "--eval_prompt_template",
        "qwen3_general",
    )
    assert notes(capsys) == {"enable_prefix_caching", "prompt_template", "eval_prompt_template"}
    cfg_of("--recipe", "spiral", "--enable_prefix_caching")  # on: noted too (serl has no switch)
    assert notes(capsys) == {"enable_prefix_caching"}
    # without OAT's batch flags serl's own options keep serl's meaning
    cfg = cfg_of("--recipe", "spiral", "--eval_steps", "16", "--save_steps", "4", "--lr_warmup_ratio", "0.1")
    assert (cfg.eval_steps, cfg.save_steps, cfg.lr_warmup_ratio) == (16, 4, 0.1) and notes(capsys) == set()
    assert cfg_of("--recipe", "spiral", "--eval_steps", "0", "--save_steps", "0").eval_steps == 0  # serl's 0


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--num_samples", "2"], "--num_samples 2: spiral-rl's actor samples one response .* only 1"),
        (["--reward_scaling", "0.5"], "--reward_scaling 0.5: .* serl has no reward scale; only 1"),
        (["--lr_scheduler", "cosine_with_min_lr"], "--lr_scheduler cosine_with_min_lr: only 'constant'"),
        (["--lr_scheduler", "polynomial"], "--lr_scheduler polynomial: only 'constant'"),
        (
            ["--lr_scheduler", "constant", "--lr_warmup_ratio", "0.03"],
            "--lr_warmup_ratio 0.03: OAT's constant schedule",
        ),
        (
            ["--gpus", "1", "--max_train", "51200", "--pi_buffer_maxlen_per_device", "16"],
            "--pi_buffer_maxlen_per_device 16: .* newest 16 of the 128 samples",
        ),
        (
            ["--gpus", "8", "--collocate", "--pi_buffer_maxlen_per_device", "32"],
            "--pi_buffer_maxlen_per_device 32: .* re-trains up to 16 older",
        ),
        (["--rollout_batch_size", "100", "--max_train", "51200"], r"--rollout_batch_size 100: .* \(16\) = 64"),
        (["--max_train", "10"], "--max_train 10: OAT would stop .* before its first update"),
        (["--max_train", "100", "--steps", "3"], "--max_train: it sets --steps"),
        (
            ["--eval_opponent_names", "random", "google/gemini-2.0-flash-lite-001"],
            "--eval_opponent_names random google/gemini-2.0-flash-lite-001: .* uniform random only",
        ),
        (
            ["--fixed_opponent", "google/gemini-2.0-flash-001"],
            "--fixed_opponent google/gemini-2.0-flash-001: .* no API",
        ),
        (["--env_id", "TicTacToe-v0", "--use_llm_obs_wrapper"], "--use_llm_obs_wrapper: true for tictactoe"),
        (["--env_id", "KuhnPoker-v1", "--no-use-llm-obs-wrapper"], "--use_llm_obs_wrapper: false for kuhn_poker"),
        (["--use_llm_obs_wrapper"], "--use_llm_obs_wrapper: true for tictactoe"),  # serl's default games have it
        (
            ["--eval_env_ids", "TicTacToe-v0", "KuhnPoker-v1", "--eval_use_llm_obs_wrappers", "True", "True"],
            "--eval_use_llm_obs_wrappers: true for tictactoe",
        ),
        (
            ["--eval_env_ids", "TicTacToe-v0", "--eval_use_llm_obs_wrappers", "False", "True"],
            r"--eval_use_llm_obs_wrappers: 2 value\(s\) for 1",
        ),
        (["--eval_use_llm_obs_wrappers", "False", "True"], "--eval_use_llm_obs_wrappers: pairs one value .* give both"),
        (["--eval_split", "aime,math"], "--eval_split aime,math: serl's SPIRAL runs no math evaluation"),
        (["--prompt_template", "r1"], "--prompt_template r1: spiral-rl itself takes no other"),
        (["--eval_prompt_template", "qwen3"], "--eval_prompt_template qwen3: spiral-rl itself takes no other"),
        (["--eval_steps", "-1"], "--eval_steps -1: OAT then never evaluates, but serl's 0 still evaluates"),
        (["--max_train", "51200", "--eval_steps", "0"], "--eval_steps 0: OAT then never evaluates"),  # an OAT command
        (["--num_envs", "0"], "--num_envs: expected a whole number >= 1, got 0"),
        (["--max_model_len", "many"], "--max_model_len: expected a whole number"),
        (["--eval_generate_max_length", "512"], "eval_generate_max_len: must be in"),  # above --generate_max_len 256
    ],
)
def test_spiral_rl_refusals_name_the_flag(flags, message, capsys):
    with pytest.raises(ConfigError, match=message):
        cfg_of("--recipe", "spiral", *flags)


@pytest.mark.parametrize("words", [["--save_steps", "-1"], ["trainer.save_freq=-1"]])
def test_minus_one_save_interval_means_only_the_final_checkpoint(words):
    """OpenRLHF's and verl's -1: no periodic checkpoints (step % -1 == 0 would have saved every step)."""
    assert cfg_of(*words).save_steps == 0


def test_serl_s_reward_file_names_and_a_missing_one_names_serl_s_files():
    from pathlib import Path

    ours = Path(__file__).resolve().parents[2] / "reward_utils"
    for name in ("math_verify_maj_reward.py", "math_verify_reward.py"):
        assert cfg_of("--remote_rm_url", str(ours / name)).remote_rm_url == str(ours / name)
    # SeRL's README path: the file is found under the name SeRL uses
    with pytest.raises(
        ConfigError,
        match=r"reward file not found: /path/to/your/SeRL/reward_utils/"
        r"math_verify_maj_reward.py; serl ships it as .*reward_utils/"
        r"math_verify_maj_reward.py$",
    ):
        cfg_of("--remote_rm_url", "/path/to/your/SeRL/reward_utils/math_verify_maj_reward.py")
    with pytest.raises(
        ConfigError,
        match=r"reward file not found: x/mine.py; serl's reward files, in .*: "
        r"majority_vote_reward.py, math_rule_reward.py, math_verify_maj_reward.py, "
        r"math_verify_reward.py$",
    ):
        cfg_of("--remote_rm_url", "x/mine.py")
    with pytest.raises(ConfigError, match=r"serl takes one reward source, got 2 .*pass the training reward alone"):
        cfg_of("--remote_rm_url", f"{ours}/math_verify_maj_reward.py,{ours}/math_verify_reward.py")


def test_serl_template_flags_serl_has_no_option_for_are_noted_or_refused_in_one_line(capsys, tmp_path):
    """SeRL's README and templates pass these; each is mapped, noted on stderr, or refused with serl's way."""
    cfg = cfg_of(
        "--filtered_data_root_dir",
        f"{tmp_path}/f",
        "--evolution_generation_data_root_dir",
        f"{tmp_path}/e",
        "--train_samples_root_dir",
        f"{tmp_path}/t",
        "--eval_output_root_dir",
        f"{tmp_path}/o",
        "--packing_samples",
        "--save_hf_ckpt",
        "--flash_attn",
        "--num_episodes",
        "1",
        "--steps",
        "3",
    )
    assert cfg.steps == 3 and not any((tmp_path / d).exists() for d in "feto")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 8 and all(x.startswith("serl: note: --") for x in err)
    assert f"serl: note: --filtered_data_root_dir {tmp_path / 'f'}: serl keeps a run's self-made problems" in err[0]
    assert "serl: note: --num_episodes 1: serl counts training steps; --steps decides" in err
    for words, message in [
        (
            ["--num_episodes", "1"],
            "--num_episodes: serl counts training steps, not passes over the prompts; give --steps N instead",
        ),
        (["--load_checkpoint"], "--load_checkpoint: serl continues a run with `serl train --resume RUN_DIR`"),
        (["--ckpt.load_enable"], "--ckpt.load_enable: serl continues a run with `serl train --resume RUN_DIR`"),
        (["--normalize_reward"], "--normalize_reward: serl has no running reward normalisation"),
        (["--critic.model_name_or_path", "x"], "--critic.model_name_or_path: serl trains no critic"),
        (["--ds.deepcompile"], "--ds.deepcompile: this OpenRLHF 0.11 flag has no serl meaning and is refused"),
        (["--train.max_epochs", "2"], "--max_epochs: serl trains each rollout once per step"),
    ]:
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
            rewrite(words)


def test_openrlhf_0_11_dotted_flags():
    cfg = cfg_of(
        "--actor.model_name_or_path",
        "smollm2",
        "--data.prompt_dataset",
        "dataset/arith_seed.jsonl",
        "--data.input_key",
        "problem",
        "--data.label_key",
        "answer",
        "--eval.dataset",
        "dataset/arith_heldout.jsonl",
        "--eval.steps",
        "5",
        "--ckpt.save_steps",
        "4",
        "--ckpt.max_num",
        "2",
        "--ckpt.output_dir",
        "runs/y",
        "--rollout.batch_size",
        "8",
        "--rollout.n_samples_per_prompt",
        "4",
        "--rollout.max_new_tokens",
        "64",
        "--rollout.temperature",
        "0.9",
        "--train.batch_size",
        "16",
        "--train.micro_batch_size",
        "2",
        "--train.seed",
        "3",
        "--train.async_enable",
        "--actor.adam.lr",
        "2e-6",
        "--algo.advantage.estimator",
        "rloo",
        "--algo.kl.init_coef",
        "0.01",
        "--algo.kl.use_loss",
        "--reward.remote_url",
        "http://127.0.0.1:5000/get_reward",
        "--train.max_epochs",
        "1",
        "--logger.wandb.project",
        "p",
        "--logger.wandb.run_name",
        "r",
        "--ds.lora.rank",
        "8",
    )
    assert (cfg.model, cfg.prompt_data, cfg.eval_data, cfg.run_dir) == (
        "smollm2",
        "dataset/arith_seed.jsonl",
        "dataset/arith_heldout.jsonl",
        "runs/y",
    )
    assert (cfg.eval_steps, cfg.save_steps, cfg.max_ckpt_num, cfg.rollout_batch_size, cfg.n_samples_per_prompt) == (
        5,
        4,
        2,
        8,
        4,
    )
    assert (cfg.generate_max_len, cfg.temperature, cfg.train_batch_size, cfg.micro_train_batch_size, cfg.seed) == (
        64,
        0.9,
        16,
        2,
        3,
    )
    assert cfg.async_train and cfg.actor_learning_rate == 2e-6 and cfg.advantage_estimator == "rloo"
    assert cfg.init_kl_coef == 0.01 and cfg.use_kl_loss and cfg.remote_rm_url.startswith("http://127.0.0.1:5000")
    assert (cfg.wandb_project, cfg.wandb_run_name, cfg.lora_rank) == ("p", "r", 8)


def test_spiral_on_tinker_keys(capsys):
    # spiral-rl's Tinker README: python train_spiral_tinker.py model_name=... renderer_name=qwen3 env_ids=... ...
    cfg = cfg_of(
        "--recipe",
        "spiral",
        "model_name=smollm2",
        "renderer_name=qwen3",
        "env_ids=TicTacToe-v0,KuhnPoker-v1",
        "batch_size=128",
        "learning_rate=4e-5",
        "wandb_project=spiral",
        "max_tokens=256",
        "use_async_actor_learner=True",
        "replay_buffer_max_staleness=2",
        "loss_fn=ppo",
    )
    assert cfg.model == "smollm2" and cfg.games_per_step == 64 and cfg.actor_learning_rate == 4e-5
    assert cfg.game_list() == ["tictactoe", "kuhn_poker"] and cfg.wandb_project == "spiral"
    assert cfg.generate_max_len == 256 and cfg.async_train and cfg.max_staleness == 2
    err = capsys.readouterr().err
    assert "serl: note: --renderer_name qwen3: serl writes its game prompt inside the model's own chat template" in err
    assert "serl: note: --batch_size 128: Tinker's batch is both players of 64 games: serl's --games_per_step 64" in err
    with pytest.raises(
        ConfigError,
        match=r"--load_checkpoint_path: Tinker's hosted checkpoints \(tinker://...\) "
        r"cannot be read here",
    ):
        rewrite(["--recipe", "spiral", "load_checkpoint_path=tinker://xxx/weights/000180"])
    with pytest.raises(ConfigError, match="--loss_fn: serl's SPIRAL has one policy loss"):
        rewrite(["--recipe", "spiral", "loss_fn=importance_sampling"])
    with pytest.raises(ConfigError, match="--batch_size: expected an even whole number"):
        rewrite(["--recipe", "spiral", "batch_size=7"])


def test_spiral_s_current_textarena_ids(capsys):
    # the FSP example of spiral-rl's Tinker README
    cfg = cfg_of("--recipe", "spiral", "env_ids=KuhnPoker-v1,LiarsDice-v1", "fsp_enabled=True", "fsp_pool_size=25")
    assert cfg.game_list() == ["kuhn_poker", "liars_dice"]
    assert "serl: note: LiarsDice-v1: played as serl's liars_dice" in capsys.readouterr().err
    with pytest.raises(
        ValueError,
        match="SimpleNegotiation-v2: spiral-rl's five-resource negotiation; serl's "
        "simple_negotiation is the two-resource game of SimpleNegotiation-v1",
    ):
        check_game_names("SimpleNegotiation-v2")
    with pytest.raises(ValueError, match="ConnectFour-v0: serl has no Connect Four"):
        check_game_names(["TicTacToe-v0", "ConnectFour-v0"])


def test_verl_label_is_found_without_label_key(tmp_path):
    import json

    f = tmp_path / "verl.jsonl"
    f.write_text(
        json.dumps({"prompt": "1+1?", "reward_model": {"style": "rule", "ground_truth": "2"}})
        + "\n"
        + json.dumps({"prompt": "2+2?", "answer": "4", "reward_model": {"ground_truth": "5"}})
        + "\n"
    )
    a, b = read_seeds(f, "prompt")  # --label_key's default, 'answer', first; else verl's field
    assert (a.label, b.label) == ("2", "4")
    assert [p.label for p in read_seeds(f, "prompt", "reward_model.ground_truth")] == ["2", "5"]


def test_unknown_flags_get_one_line_and_help_points_to_compat(train_here, capsys):
    rc, err = train_here("--no_such_flag", "1")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "usage:" not in err
    assert err.startswith("serl: error: --no_such_flag 1: not an option of serl train; `serl train --help`")
    assert "docs/compat.md" in err
    rc, err = train_here("--rollout_batch_sise", "4")
    assert "(did you mean --rollout_batch_size?)" in err and len(err.strip().splitlines()) == 1
    rc, err = train_here("--recipe", "spiral", "--prompt_data", "x.jsonl")  # a section the recipe does not read
    assert rc == 2 and len(err.strip().splitlines()) == 1
    from serl.config.parser import build_parser

    text = build_parser().format_help()
    assert "docs/compat.md" in text
    assert "--eval_data <- --eval_dataset, --eval.dataset, data.val_files" in " ".join(text.split())
    assert "--remote_rm_url <- --reward.remote_url" in " ".join(text.split())
