"""Every flag of SeRL's published template and of verl's recipe/spin/run_spin.sh, in one run each: each
is mapped, noted or refused with its reason, all refusals in one message; Hydra's +key and ++key."""

from pathlib import Path

from serl.config.compat import rewrite
from serl.config.parser import parse_args

ROOT = Path(__file__).resolve().parents[2]
DATA = str(ROOT / "dataset/arith_seed.jsonl")

# SeRL's openrlhf/scripts/train/train_llama32_3b_reinforce_pp_serl_template.sh, its flags in order (paths here)
SERL_TEMPLATE = [
    "--ref_num_nodes",
    "1",
    "--ref_num_gpus_per_node",
    "8",
    "--reward_num_nodes",
    "1",
    "--reward_num_gpus_per_node",
    "8",
    "--actor_num_nodes",
    "1",
    "--actor_num_gpus_per_node",
    "8",
    "--vllm_num_engines",
    "8",
    "--vllm_tensor_parallel_size",
    "1",
    "--vllm_gpu_memory_utilization",
    "0.6",
    "--colocate_all_models",
    "--advantage_estimator",
    "reinforce",
    "--pretrain",
    "smollm2",
    "--remote_rm_url",
    "reward_utils/math_verify_maj_reward.py,reward_utils/math_verify_reward.py",
    "--save_path",
    "/tmp/serl-never-written",
    "--ckpt_path",
    "/tmp/serl-never-written/ckpt",
    "--save_hf_ckpt",
    "--micro_train_batch_size",
    "1",
    "--train_batch_size",
    "16",
    "--micro_rollout_batch_size",
    "4",
    "--rollout_batch_size",
    "16",
    "--n_samples_per_prompt",
    "16",
    "--max_epochs",
    "1",
    "--prompt_max_len",
    "1024",
    "--max_samples",
    "100000",
    "--generate_max_len",
    "1024",
    "--zero_stage",
    "3",
    "--save_steps",
    "50",
    "--eval_steps",
    "1",
    "--bf16",
    "--actor_learning_rate",
    "5e-7",
    "--critic_learning_rate",
    "9e-6",
    "--init_kl_coef",
    "1e-4",
    "--prompt_data",
    DATA,
    "--input_key",
    "problem",
    "--label_key",
    "answer",
    "--normalize_reward",
    "--adam_offload",
    "--gradient_checkpointing",
    "--packing_samples",
    "--vllm_sync_backend",
    "nccl",
    "--enforce_eager",
    "--vllm_enable_sleep",
    "--deepspeed_enable_sleep",
    "--use_wandb",
    "false",
    "--wandb_run_name",
    "run",
    "--eval_output_root_dir",
    "/tmp/x",
    "--train_samples_root_dir",
    "/tmp/x",
    "--filtered_data_root_dir",
    "/tmp/x",
    "--eval_dataset",
    DATA,
    "--self_reward_method",
    "bon_maj",
    "--eval_n_samples_per_prompt",
    "1",
    "--eval_temperature",
    "0",
    "--reward_difficulty_bounds",
    "0.2",
    "0.8",
    "--enable_self_evolution",
    "--few_shot_generation",
    "8",
    "--evolution_generation_data_root_dir",
    "/tmp/x",
    "--few_shot_generation_prompt",
    str(ROOT / "prompts/self_instruct_fewshot.txt"),
    "--few_shot_generation_batch_size",
    "4",
    "--num_episodes",
    "1000000",
    "--instructions_num_per_iteration",
    "2000",
]

# verl's recipe/spin/run_spin.sh, as bash passes its words (paths here)
RUN_SPIN = [
    f"data.train_files={DATA}",
    f"data.val_files={DATA}",
    "data.train_batch_size=32",
    "data.max_prompt_length=1024",
    "data.max_response_length=1024",
    "actor_rollout_ref.model.path=smollm2",
    "actor_rollout_ref.actor.optim.lr=1e-6",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    "actor_rollout_ref.actor.ppo_micro_batch_size=8",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size=8",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
    "actor_rollout_ref.ref.log_prob_micro_batch_size=8",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "trainer.logger=[console]",
    "trainer.val_before_train=True",
    "trainer.default_hdfs_dir=null",
    "trainer.n_gpus_per_node=4",
    "trainer.nnodes=1",
    "trainer.save_freq=-1",
    "trainer.test_freq=1",
    "+trainer.log_freq=1",
    "+trainer.ref_update_freq=1",
    "trainer.total_epochs=1000",
]


def test_serl_template_every_flag_is_read_and_all_refusals_come_at_once(train_here):
    rc, err = train_here(*SERL_TEMPLATE)
    assert rc == 2
    assert "unrecognized arguments" not in err and "not an option" not in err, err
    refused = [line.strip() for line in err.splitlines() if line.startswith("  ")]
    # the two that change what is trained, each with its reason and serl's way, in the same message
    assert "options refused" in err and len(refused) == 2, err
    assert any(r.startswith("--normalize_reward: serl has no running reward normalisation") for r in refused)
    assert any(r.startswith("--num_episodes: serl counts training steps") and "--steps N" in r for r in refused)
    assert "add --recipe spiral" not in err  # --eval_temperature 0 is SeRL's here, not spiral-rl's


def test_serl_template_parses_once_its_two_refusals_are_answered(capsys):
    argv = [a for a in SERL_TEMPLATE if a != "--normalize_reward"]
    # serl's evaluation scores with its own rule check: the template's second reward file is left out
    argv[argv.index("--remote_rm_url") + 1] = str(ROOT / "reward_utils/math_verify_maj_reward.py")
    k = argv.index("--num_episodes")
    argv[k : k + 2] = ["--steps", "3"]
    # what scripts/train/_fit.sh adds on a machine without GPUs (the template's layout needs 8)
    argv += [
        "--ray",
        "false",
        "--learner",
        "torch",
        "--device",
        "cpu",
        "--colocate_all_models",
        "false",
        "--vllm_enable_sleep",
        "false",
        "--adam_offload",
        "false",
        "--bf16",
        "false",
    ]
    refused: list[str] = []
    cfg, _ = parse_args(rewrite(argv, refused), refused=refused)
    assert refused == []
    assert (cfg.reward_mode, cfg.eval_k, cfg.steps, cfg.enable_self_evolution) == ("majority", 0, 3, True)
    notes = capsys.readouterr().err
    for flag in (
        "--critic_learning_rate",
        "--deepspeed_enable_sleep",
        "--eval_temperature",
        "--eval_n_samples_per_prompt",
    ):
        assert f"serl: note: {flag}" in notes


def test_verl_run_spin_chooses_online_dpo(capsys):
    refused: list[str] = []
    argv = rewrite(["--recipe", "spin", *RUN_SPIN, "trainer.total_training_steps=2"], refused)
    assert refused == []
    cfg, _ = parse_args(argv)
    assert cfg.spin_mode == "online" and cfg.ref_update == "steps:1" and cfg.save_steps == 0
    assert (cfg.rollout_batch_size, cfg.micro_train_batch_size, cfg.steps) == (32, 8, 2)
    assert not cfg.use_wandb
    assert "online DPO (--spin_mode online)" in capsys.readouterr().err


def test_verl_run_spin_as_written_says_what_to_add(train_here):
    rc, err = train_here("--recipe", "spin", *RUN_SPIN)  # trainer.total_epochs: serl counts steps
    assert rc == 2 and "trainer.total_training_steps=N" in err
    assert len(err.strip().splitlines()) == 1 + err.count("serl: note:")


def test_hydra_plus_forms_are_read():
    for word in ("+trainer.ref_update_freq=3", "++trainer.ref_update_freq=3", "trainer.ref_update_freq=3"):
        assert rewrite(["--recipe", "spin", "--spin_mode", "spin", word]) == [
            "--recipe",
            "spin",
            "--spin_mode",
            "spin",
            "--ref_update",
            "steps:3",
        ]


def test_tinker_keys_without_spiral_are_told_to_add_it(train_here):
    rc, err = train_here("max_tokens=64", "renderer_name=qwen3")
    assert rc == 2 and err.count("add --recipe spiral") == 2 and "not an option" not in err


def test_spell_s_own_names_are_read():
    argv = rewrite(
        [
            "--recipe",
            "spell",
            "reward_combined_function=max",
            "self_verification.update_lower_bound=0.6",
            "self_verification.update_upper_bound=0.9",
            "self_verification.label_type=maj_cons",
            "data.train_files=docs.jsonl",
        ]
    )
    cfg, _ = parse_args(argv)
    assert (cfg.responder_reward, cfg.verifier_band, cfg.corpus) == ("max", [0.6, 0.9], "docs.jsonl")
    cfg, _ = parse_args(rewrite(["--recipe", "spell", "+self_verification.update_upper_bound=0.8"]))
    assert cfg.verifier_band == [0.51, 0.8]


def test_spell_s_names_without_a_serl_meaning_say_why(train_here):
    rc, err = train_here(
        "--recipe",
        "spell",
        "reward_combined_function=mean",
        "self_verification.enable=False",
        "data.val_files=x.parquet",
    )
    assert rc == 2 and "3 options refused" in err and "leave it out" not in err
    assert "--responder_reward rule" in err and "held-out files" in err


def test_spin_mode_spin_without_human_answers_names_online(tmp_path, train_here):
    data = tmp_path / "q.jsonl"
    data.write_text('{"question": "1+1?", "answer": "2"}\n')
    rc, err = train_here(
        "--recipe",
        "spin",
        "--spin_mode",
        "spin",
        "--prompt_data",
        str(data),
        "--input_key",
        "question",
        "--steps",
        "1",
        "--generator",
        "hf",
    )
    assert rc == 2 and "missing key 'solution'" in err and "--spin_mode online" in err, err[-2000:]
