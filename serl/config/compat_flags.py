"""Flags of SeRL/OpenRLHF and SPIRAL-on-Tinker that serl reads in its own way: OpenRLHF 0.11's
dotted names (``--reward.remote_url``), the names of SeRL's templates that serl has no option
for, and the ``key=value`` words of spiral-rl's Tinker trainer (``train_spiral_tinker.py``).

``translate(name, vals)`` -> the serl words for ``--name vals``, or None when ``name`` is not
one of these. A name is mapped (the serl flag), noted (accepted, one ``serl: note:`` line on
stderr saying why it changes nothing), or refused (ConfigError naming the flag, the reason and
serl's way). docs/compat.md has the table; tests/config/test_compat.py checks it. ``FLAGS`` and
``VERL_KEYS`` (``serl.config.compat``'s tables) live here too, so that ``serl train --help`` can list the
names of all of them (``foreign_names``) without importing ``serl.config.compat``.
"""

from __future__ import annotations

import sys

from serl import ConfigError

# Other spellings of serl's own options (OpenRLHF's and serl's earlier names), accepted as flags and as
# YAML keys for every recipe, with the option's own help line. This table is their only home: the
# options (serl.config.options) and the engine know each option by its one name (docs/options.md).
ALIASES: dict[str, str] = {
    "pretrain": "model",  # OpenRLHF / SeRL's scripts
    "seed_data": "prompt_data",
    "save_path": "run_dir",  # OpenRLHF / SeRL's scripts
    "lr": "actor_learning_rate",
    "tensorboard_dir": "use_tensorboard",  # OpenRLHF 0.5's name
}


def aliases_of(name: str) -> tuple[str, ...]:
    """The other spellings of serl option ``name`` (``ALIASES``), for the parser and the YAML reader."""
    return tuple(a for a, ours in ALIASES.items() if ours == name)


# a flag of another project -> (serl flag, recipes it applies to; None = every recipe)
FLAGS: dict[str, tuple[str, tuple[str, ...] | None]] = {
    "eval_dataset": ("eval_data", None),  # OpenRLHF: held-out prompts
    "model_name": ("model", None),  # spiral-rl / oat
    "learning_rate": ("actor_learning_rate", None),
    "env_ids": ("games", ("spiral",)),  # spiral-rl: TextArena ids, space-separated
    "env_id": ("games", ("spiral",)),
    "num_ppo_epochs": ("ppo_epochs", ("spiral",)),
    # spiral-rl's gamma discounts a player's earlier turns (A * gamma**k, k = its later turns), not tokens
    "gamma": ("turn_discount", ("spiral",)),
    "role_baseline_ema_gamma": ("rae_alpha", ("spiral",)),
    "use_role_baseline": ("rae", ("spiral",)),
    "fsp_update_interval": ("population_every", ("spiral",)),
    "generate_max_length": ("generate_max_len", None),
    "eval_generate_max_length": ("eval_generate_max_len", ("spiral",)),  # spiral-rl's game evaluation
    # spiral-rl runs on OAT (sail-sg/oat, oat/args.py): its resource, checkpoint and W&B names
    "vllm_gpu_ratio": ("vllm_gpu_memory_utilization", ("spiral",)),
    "vllm_sleep": ("vllm_enable_sleep", ("spiral",)),
    "max_save_num": ("max_ckpt_num", ("spiral",)),
    "train_batch_size_per_device": ("micro_train_batch_size", ("spiral",)),
    "use_wb": ("use_wandb", ("spiral",)),
    "wb_project": ("wandb_project", ("spiral",)),
    "wb_run_name": ("wandb_run_name", ("spiral",)),
    # truncated importance sampling: OpenRLHF's and TRL's names (docs/async.md)
    "enable_vllm_is_correction": ("importance_sampling_correction", None),
    "vllm_importance_sampling_correction": ("importance_sampling_correction", None),
    "vllm_importance_sampling_cap": ("importance_sampling_cap", None),
}

# verl's dotted keys with a serl meaning -> (serl flag, how the value changes)
VERL_KEYS = {
    "algorithm.dpo_beta": ("beta", None),
    "algorithm.dpo_loss_type": ("dpo_loss", None),
    "trainer.ref_update_freq": ("ref_update", "steps"),
    "trainer.total_training_steps": ("steps", None),
    "trainer.test_freq": ("eval_steps", None),
    "trainer.default_local_dir": ("run_dir", None),
    "trainer.project_name": ("wandb_project", None),
    "trainer.experiment_name": ("wandb_run_name", None),
    "data.train_files": ("prompt_data", None),
    "data.val_files": ("eval_data", None),
    "data.prompt_key": ("input_key", None),
    "data.train_batch_size": ("rollout_batch_size", None),
    "data.max_prompt_length": ("prompt_max_len", None),
    "data.max_response_length": ("generate_max_len", None),
    "actor_rollout_ref.model.path": ("model", None),
    "actor_rollout_ref.actor.optim.lr": ("actor_learning_rate", None),
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": ("micro_train_batch_size", None),
    "actor_rollout_ref.rollout.n": ("n_samples_per_prompt", None),
    "actor_rollout_ref.rollout.temperature": ("temperature", None),
    "actor_rollout_ref.rollout.top_p": ("top_p", None),
    "actor_rollout_ref.model.enable_gradient_checkpointing": ("gradient_checkpointing", None),
    "actor_rollout_ref.actor.ppo_micro_batch_size": ("micro_train_batch_size", None),  # verl's older name
    "actor_rollout_ref.rollout.log_prob_micro_batch_size": ("micro_rollout_batch_size", None),
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": ("micro_rollout_batch_size", None),
    "actor_rollout_ref.rollout.tensor_model_parallel_size": ("vllm_tensor_parallel_size", None),
    "actor_rollout_ref.rollout.gpu_memory_utilization": ("vllm_gpu_memory_utilization", None),
    "trainer.save_freq": ("save_steps", "freq"),  # verl: -1 = never, serl: 0
    "trainer.logger": ("use_wandb", "logger"),  # verl: ['console', 'wandb']
}

# verl's keys (run_spin.sh's among them) accepted with a note: why each changes nothing in serl.
# "when": the one value the note holds for (verl's own default), or None for any value.
_NO_HDFS = "serl keeps everything in its run directory (--run_dir) and copies nothing to HDFS"
VERL_NOTED = {
    "actor_rollout_ref.actor.ppo_mini_batch_size": (
        None,
        "serl makes one optimizer step of a step's pairs (--train_batch_size splits it)",
    ),
    "actor_rollout_ref.ref.log_prob_micro_batch_size": (
        None,
        "the reference's log-probs use --micro_rollout_batch_size, as the policy's",
    ),
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": (
        None,
        "the reference's log-probs use --micro_rollout_batch_size, as the policy's",
    ),
    "algorithm.kl_ctrl.kl_coef": (
        None,
        "DPO has no KL penalty: its --beta (algorithm.dpo_beta) is the pull to the reference",
    ),
    "trainer.val_before_train": ("true", "serl evaluates before the first step whenever the run has an evaluation set"),
    "trainer.default_hdfs_dir": ("null", _NO_HDFS),
    "trainer.n_gpus_per_node": (
        None,
        "serl uses the GPUs it finds (with --ray: --actor_num_gpus_per_node and --vllm_num_engines place them)",
    ),
    "trainer.nnodes": ("1", "serl runs on this machine (with --ray: --actor_num_nodes)"),
    "trainer.log_freq": ("1", "serl logs every step"),
}

# OpenRLHF 0.11's dotted flags (openrlhf/cli/train_ppo_ray.py) with a serl meaning -> serl's flag
DOTTED = {
    "actor.model_name_or_path": "model",
    "reward.remote_url": "remote_rm_url",
    "reward.overlong_buffer_len": "overlong_buffer_len",  # SeRL recipe (issue 62)
    "reward.overlong_penalty_factor": "overlong_penalty_factor",
    "reward.stop_properly_penalty_coef": "stop_properly_penalty_coef",
    "data.prompt_dataset": "prompt_data",
    "data.input_key": "input_key",
    "data.label_key": "label_key",
    "data.prompt_split": "prompt_split",
    "data.max_samples": "max_samples",
    "eval.dataset": "eval_data",
    "eval.split": "eval_split",
    "eval.steps": "eval_steps",
    "ckpt.save_steps": "save_steps",
    "ckpt.path": "ckpt_path",
    "ckpt.max_num": "max_ckpt_num",
    "ckpt.best_metric_key": "save_best",  # OpenRLHF's keys (eval_default_pass1) differ: serl names its own
    "ckpt.output_dir": "run_dir",
    "rollout.batch_size": "rollout_batch_size",
    "rollout.micro_batch_size": "micro_rollout_batch_size",
    "rollout.n_samples_per_prompt": "n_samples_per_prompt",
    "rollout.max_new_tokens": "generate_max_len",
    "rollout.temperature": "temperature",
    "rollout.top_p": "top_p",
    "train.batch_size": "train_batch_size",
    "train.micro_batch_size": "micro_train_batch_size",
    "train.seed": "seed",
    "train.async_enable": "async_train",
    "train.colocate_all": "colocate_all_models",
    "algo.advantage.estimator": "advantage_estimator",
    "algo.advantage.gamma": "gamma",
    "algo.kl.init_coef": "init_kl_coef",
    "algo.kl.estimator": "kl_estimator",
    "algo.kl.use_loss": "use_kl_loss",
    "actor.eps_clip": "eps_clip",
    "actor.adam.lr": "actor_learning_rate",
    "actor.lr_warmup_ratio": "lr_warmup_ratio",
    "actor.min_lr_ratio": "min_lr_ratio",
    "actor.max_norm": "max_norm",
    "actor.gradient_checkpointing_enable": "gradient_checkpointing",
    "actor.num_nodes": "actor_num_nodes",
    "actor.num_gpus_per_node": "actor_num_gpus_per_node",
    "ref.num_nodes": "ref_num_nodes",
    "ref.num_gpus_per_node": "ref_num_gpus_per_node",
    "reward.num_nodes": "reward_num_nodes",
    "reward.num_gpus_per_node": "reward_num_gpus_per_node",
    "vllm.num_engines": "vllm_num_engines",
    "vllm.tensor_parallel_size": "vllm_tensor_parallel_size",
    "vllm.gpu_memory_utilization": "vllm_gpu_memory_utilization",
    "vllm.enable_sleep": "vllm_enable_sleep",
    "ds.zero_stage": "zero_stage",
    "ds.adam_offload": "adam_offload",
    "ds.attn_implementation": "attn_implementation",
    "ds.lora.rank": "lora_rank",
    "ds.lora.alpha": "lora_alpha",
    "ds.lora.dropout": "lora_dropout",
    "ds.lora.target_modules": "target_modules",
    "logger.wandb.key": "use_wandb",
    "logger.wandb.project": "wandb_project",
    "logger.wandb.run_name": "wandb_run_name",
    "logger.tensorboard_dir": "use_tensorboard",
}

_RUN_DIR = (
    "serl keeps a run's self-made problems (pool.jsonl), samples, metrics and evaluation results "
    "in its run directory (--save_path / --run_dir); this folder is not written"
)
# accepted with a note: they shape where OpenRLHF writes or how it lays out memory, not what is trained
NOTED = {
    "filtered_data_root_dir": _RUN_DIR,
    "evolution_generation_data_root_dir": _RUN_DIR,
    "train_samples_root_dir": _RUN_DIR,
    "eval_output_root_dir": _RUN_DIR,
    "packing_samples": "serl always packs each micro-batch into one row, attention kept inside each sequence",
    "ds.packing_samples": "serl always packs each micro-batch into one row, attention kept inside each sequence",
    "save_hf_ckpt": "serl writes the Hugging Face model at the end (RUN_DIR/model, --save_model); its "
    "checkpoints are for --resume",
    "ckpt.save_hf": "serl writes the Hugging Face model at the end (RUN_DIR/model, --save_model); its "
    "checkpoints are for --resume",
    "flash_attn": "serl picks the attention kernel itself (--attn_implementation to choose)",
    "logging_steps": "serl logs every step",
    "logger.logging_steps": "serl logs every step",
    "vllm_sync_backend": "serl sends weights to its engines its own way",
    "vllm.sync_backend": "serl sends weights to its engines its own way",
    "enforce_eager": "serl's engines on the CPU run eager; on a GPU vLLM decides",
    "vllm.enforce_eager": "serl's engines on the CPU run eager; on a GPU vLLM decides",
}
_RESUME = "serl continues a run with `serl train --resume RUN_DIR` (its config.yaml and newest checkpoint)"
# refused: the reason and serl's way
REFUSED = {
    "load_checkpoint": _RESUME,
    "ckpt.load_enable": _RESUME,
    "normalize_reward": "serl has no running reward normalisation; the advantage estimator "
    "(--advantage_estimator group_norm, rloo, ...) normalises within a group",
    "reward.normalize_enable": "serl has no running reward normalisation; the advantage estimator "
    "(--advantage_estimator group_norm, rloo, ...) normalises within a group",
    "critic.model_name_or_path": "serl trains no critic: its estimators (reinforce, rloo, group_norm, ...) need none",
    "reward.model_name_or_path": "serl has no reward-model worker; rewards come from --reward_mode or "
    "--remote_rm_url (an http URL or a reward file)",
}


_TINKER_CKPT = (
    "Tinker's hosted checkpoints (tinker://...) cannot be read here (Tinker is a hosted service); "
    "serl continues its own runs with `serl train --resume RUN_DIR`"
)
# spiral-rl 0.2.0's Tinker trainer (spiral/tinker), with --recipe spiral: name -> (serl flag | None, why)
TINKER: dict[str, tuple[str | None, str | None]] = {
    "max_tokens": ("generate_max_len", None),  # tokens a turn's response may take
    "use_async_actor_learner": ("async_train", None),
    "replay_buffer_max_staleness": ("max_staleness", None),
    "renderer_name": (
        None,
        "serl writes its game prompt inside the model's own chat template (the "
        "tokenizer's), so there is no renderer to pick",
    ),
}
TINKER_REFUSED = {
    "loss_fn": "serl's SPIRAL has one policy loss, PPO's clipped objective (loss_fn=ppo, accepted); Tinker's "
    "other losses are not available",
    "load_checkpoint_path": _TINKER_CKPT,
    "fsp_resume_checkpoint_base": _TINKER_CKPT,
}


# SeRL's template flags serl reads (not with --recipe spiral, whose --eval_temperature is its own)
SERL_NOTED = {
    "critic_learning_rate": "serl trains no critic (its estimators, SeRL's reinforce among them, need none); "
    "OpenRLHF ignores it for them too",
    "deepspeed_enable_sleep": "serl's learner keeps its states in place between rollout and update "
    "(--adam_offload keeps the optimizer's on the CPU)",
}


def _serl_template(name: str, vals: list[str]) -> list[str] | None:
    """SeRL's evaluation and self-reward flags in serl's words, or None when ``name`` is none of them."""
    if name in SERL_NOTED:
        _note(name, vals, SERL_NOTED[name])
        return []
    if name == "self_reward_method":
        if vals != ["bon_maj"]:
            raise ConfigError(
                f"--self_reward_method: serl's label-free reward is SeRL's majority vote (bon_maj, "
                f"--reward_mode majority); got {' '.join(vals) or 'no value'}"
            )
        return ["--reward_mode", "majority"]
    if name == "eval_temperature":
        if len(vals) == 1 and _is_zero(vals[0]):
            _note(name, vals, "serl's evaluation during training is greedy (pass@1), as temperature 0 is")
            return []
        raise ConfigError(
            f"--eval_temperature: serl's evaluation is greedy pass@1, and its --eval_k extra "
            f"answers are sampled at --temperature; got {' '.join(vals) or 'no value'} "
            f"(--recipe spiral has an --eval_temperature of its own, for games)"
        )
    if name == "eval_n_samples_per_prompt":
        if len(vals) != 1 or not vals[0].strip().isdigit() or int(vals[0]) < 1:
            raise ConfigError(
                f"--eval_n_samples_per_prompt: expected a whole number >= 1, got {' '.join(vals) or 'no value'}"
            )
        if int(vals[0]) == 1:
            _note(name, vals, "serl's evaluation answers each problem once, greedily (pass@1)")
            return []
        return ["--eval_k", str(int(vals[0]))]  # K sampled answers: maj@K and pass@K beside greedy pass@1
    return None


def _is_zero(word: str) -> bool:
    try:
        return float(word) == 0
    except ValueError:
        return False


def _note(flag: str, vals: list[str], why: str) -> None:
    print(f"serl: note: --{flag} {' '.join(vals)}".rstrip() + f": {why}", file=sys.stderr)


def translate(name: str, vals: list[str], argv: list[str], recipe: str) -> list[str] | None:
    """serl's words for ``--name vals`` (see the module doc); None: not a name handled here."""
    if recipe == "spiral" and name in TINKER:
        flag, why = TINKER[name]
        if flag:
            return [f"--{flag}", *vals]
        _note(name, vals, why or "")
        return []
    if recipe == "spiral" and name == "batch_size":  # Tinker: player trajectories, two a game (one group)
        if len(vals) != 1 or not vals[0].strip().isdigit() or int(vals[0]) < 2 or int(vals[0]) % 2:
            raise ConfigError(
                f"--batch_size: expected an even whole number >= 2 (Tinker counts both players' "
                f"trajectories of each game), got {' '.join(vals) or 'no value'}"
            )
        _note(
            name,
            vals,
            f"Tinker's batch is both players of {int(vals[0]) // 2} games: serl's --games_per_step {int(vals[0]) // 2}",
        )
        return ["--games_per_step", str(int(vals[0]) // 2)]
    if recipe == "spiral" and name == "loss_fn" and vals == ["ppo"]:
        _note(name, vals, "serl's SPIRAL trains with PPO's clipped objective")
        return []
    if recipe == "spiral" and name in TINKER_REFUSED:
        raise ConfigError(f"--{name}: {TINKER_REFUSED[name]}")
    if recipe != "spiral" and name in (*TINKER, *TINKER_REFUSED):
        raise ConfigError(
            f"--{name}: a key of spiral-rl's Tinker trainer; serl reads it with --recipe spiral (add --recipe spiral)"
        )
    if recipe != "spiral":
        words = _serl_template(name, vals)
        if words is not None:
            return words
    if name in DOTTED:
        return [f"--{DOTTED[name]}", *vals]
    if name in NOTED:
        _note(name, vals, NOTED[name])
        return []
    if name in REFUSED:
        raise ConfigError(f"--{name}: {REFUSED[name]}")
    if name in ("num_episodes", "train.num_episodes"):  # passes over the prompts; serl counts steps
        if any(a == "--steps" or a.startswith("--steps=") or a.startswith("steps=") for a in argv):
            _note(name, vals, "serl counts training steps; --steps decides")
            return []
        raise ConfigError(
            f"--{name}: serl counts training steps, not passes over the prompts; give --steps N "
            f"instead (one pass over P prompts is P / --rollout_batch_size steps)"
        )
    if name == "train.max_epochs":
        return ["--max_epochs", *vals]  # read by serl.config.compat's rule for --max_epochs
    if "." in name and name.split(".")[0] in {k.split(".")[0] for k in DOTTED}:
        raise ConfigError(
            f"--{name}: this OpenRLHF 0.11 flag has no serl meaning and is refused (not dropped); "
            f"the dotted flags serl maps are listed in docs/compat.md"
        )
    return None


def foreign_names(recipe: str) -> dict[str, list[str]]:
    """serl option -> the other projects' names that reach it for ``recipe`` (for ``--help``)."""
    out: dict[str, list[str]] = {}
    pairs = [(f"--{k}", t) for k, (t, recipes) in FLAGS.items() if recipes is None or recipe in recipes]
    pairs += [(f"--{k}", t) for k, t in DOTTED.items()]
    pairs += [(k, t) for k, (t, _) in VERL_KEYS.items()]
    if recipe == "spiral":
        pairs += [(k, t) for k, (t, _) in TINKER.items() if t]
    for theirs, ours in pairs:
        out.setdefault(ours, []).append(theirs)
    return out
