"""serl.compat: the seeds' own names (SeRL/OpenRLHF, spiral-rl, verl) reach serl's options."""
import pytest

from serl.compat import rewrite
from serl.config import ConfigError, parse_args
from serl.data.seeds import DataError, read_seeds
from serl.games import check_game_names
from serl.rewards.difficulty import difficulty_reward


def cfg_of(*argv):
    return parse_args(rewrite(list(argv)))[0]


def test_openrlhf_flags():
    cfg = cfg_of("--max_epochs", "1", "--eval_dataset", "dataset/arith_heldout.jsonl", "--save_path", "runs/x",
                 "--ckpt_path", "runs/x/ckpt")
    assert cfg.eval_data == "dataset/arith_heldout.jsonl" and cfg.run_dir == "runs/x"
    with pytest.raises(ConfigError, match="--max_epochs: serl trains each rollout once .* got 2"):
        rewrite(["--max_epochs", "2"])
    cfg = cfg_of("--few_shot_generation_prompt", "prompts/self_instruct_fewshot.txt")
    assert cfg.few_shot_generation_prompt.endswith("self_instruct_fewshot.txt")
    with pytest.raises(ConfigError, match="few_shot_generation_prompt: template not found"):
        cfg_of("--few_shot_generation_prompt", "no/such/template.txt")


def test_spiral_names_and_textarena_ids():
    cfg = cfg_of("--recipe", "spiral", "--env_ids", "TicTacToe-v0", "KuhnPoker-v1", "--model_name", "smollm2",
                 "--learning_rate", "2e-6", "--num_ppo_epochs", "3", "--fsp_enabled", "--beta", "0")
    assert cfg.game_list() == ["tictactoe", "kuhn_poker"] and cfg.opponent == "population"
    assert cfg.actor_learning_rate == 2e-6 and cfg.ppo_epochs == 3 and cfg.init_kl_coef == 0
    cfg = cfg_of("--recipe", "spiral", "env_ids=SimpleNegotiation-v1,LiarsDice-v0", "fsp_enabled=false")
    assert cfg.game_list() == ["simple_negotiation", "liars_dice"] and cfg.opponent == "self"
    assert cfg_of("--recipe", "spiral", "--games", "TicTacToe-v0,KuhnPoker-v1").game_list() == ["tictactoe",
                                                                                               "kuhn_poker"]
    with pytest.raises(ValueError, match="TextArena ids: TicTacToe-v0"):
        check_game_names("Chess-v0")



def test_spiral_rl_oat_resource_checkpoint_and_wandb_names():
    """spiral-rl's scripts pass OAT's flags (oat/args.py), some with hyphens (tyro)."""
    cfg = cfg_of("--recipe", "spiral", "--gpus", "8", "--collocate", "--vllm_sleep", "--vllm_gpu_ratio", "0.45",
                 "--gradient-checkpointing", "--max_save_num", "30", "--train_batch_size_per_device", "1",
                 "--use-wb", "--wb-run-name", "spiral-run", "--wb_project", "oat-self-play")
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
    cfg = cfg_of("--recipe", "spiral", "--gamma", "0.9", "filter_draw=True", "max_draw_retries=2", "fsp_enabled=True",
                 "fsp_start_from=3", "fsp_pool_size=25", "fsp_update_interval=4", "role_baseline_ema_gamma=0.9",
                 "use_role_baseline=False")
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
    cfg = cfg_of("recipe=spin", "spin_mode=online", "algorithm.dpo_beta=0.2", "trainer.ref_update_freq=2",
                 "trainer.save_freq=2", "actor_rollout_ref.actor.optim.lr=3e-7",
                 "data.train_files=dataset/arith_spin_train.jsonl", "actor_rollout_ref.rollout.n=4")
    assert (cfg.beta, cfg.ref_update, cfg.save_steps, cfg.actor_learning_rate) == (0.2, "steps:2", 2, 3e-7)
    assert cfg.prompt_data == "dataset/arith_spin_train.jsonl" and cfg.n_samples_per_prompt == 4
    with pytest.raises(ConfigError, match="'algorithm.kl_ctrl.kl_coef' has no serl meaning and is refused"):
        rewrite(["recipe=spin", "algorithm.kl_ctrl.kl_coef=0.001"])
    with pytest.raises(ConfigError, match="trainer.ref_update_freq' must be a whole number >= 1"):
        rewrite(["trainer.ref_update_freq=-1"])
    y = tmp_path / "spin.yaml"
    y.write_text("recipe: spin\nsteps: 2\nalgorithm:\n  dpo_beta: 0.3\ntrainer:\n  ref_update_freq: 1\n"
                 "actor_rollout_ref:\n  actor:\n    optim:\n      lr: 1.0e-6\n")
    cfg = cfg_of("--config", str(y), "--steps", "5")  # the command line still overrides the file
    assert (cfg.recipe, cfg.beta, cfg.ref_update, cfg.actor_learning_rate, cfg.steps) == ("spin", 0.3, "steps:1",
                                                                                          1e-6, 5)
    y.write_text("recipe: spin\nalgorithm:\n  gamma: 1.0\n")
    with pytest.raises(ConfigError, match=r"spin.yaml: option 'algorithm.gamma'.*has no serl meaning"):
        rewrite(["--config", str(y)])


def test_verl_parquet_prompt_as_chat_messages(tmp_path):
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    rows = [{"data_source": "openai/gsm8k",
             "prompt": [{"role": "user", "content": "Natalia sold 48 clips. How many? Let's think step by step."}],
             "reward_model": {"ground_truth": "72", "style": "rule"}}]
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
