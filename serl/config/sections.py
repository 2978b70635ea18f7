"""The common options in sections, and which sections a recipe honours.

A recipe's config class declares ``SECTIONS``, the sections of common options it reads
(default: all of them). An option of a section it does not honour is refused, naming
the recipe, as an option of another recipe is: ``serl train --recipe spiral
--prompt_data x.jsonl`` exits 2 instead of starting a game run that ignores the file.
The recipe's own options are always its own.
"""

from __future__ import annotations

import dataclasses

from serl.config.compat_flags import aliases_of

# name -> (title shown by --help, the common options in it)
SECTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "run": (
        "the run",
        (
            "recipe",
            "model",
            "run_dir",
            "seed",
            "steps",
            "max_minutes",
            "eval_steps",
            "progress",
            "use_wandb",
            "wandb_project",
            "wandb_run_name",
            "use_tensorboard",
            "save_steps",
            "max_ckpt_num",
            "save_best",
            "save_model",
            "report",
            "ckpt_path",
        ),
    ),
    "seed_data": (
        "seed problems",
        ("prompt_data", "input_key", "label_key", "output_key", "prompt_split", "max_samples"),
    ),
    "math_eval": (
        "math evaluation",
        ("eval_data", "eval_split", "eval_samples", "eval_benchmarks", "eval_data_dir", "eval_limit", "eval_k"),
    ),
    "rollout": ("rollout", ("rollout_batch_size", "n_samples_per_prompt")),
    "math_reward": ("math reward", ("reward_mode", "answer_fallback")),
    "checker": ("math-equivalence checker", ("verify_timeout",)),
    "generation": (
        "generation",
        (
            "generator",
            "generator_dtype",
            "generate_max_len",
            "prompt_max_len",
            "temperature",
            "top_p",
            "system_prompt",
            "show_engine_warnings",
        ),
    ),
    "advantage": ("advantages", ("advantage_estimator", "gamma")),
    "kl": ("KL to the reference", ("init_kl_coef", "use_kl_loss", "kl_estimator", "kl_clip")),
    "learner": (
        "learner",
        (
            "eps_clip",
            "actor_learning_rate",
            "lr_warmup_ratio",
            "min_lr_ratio",
            "max_norm",
            "micro_train_batch_size",
            "train_max_tokens_per_gpu",
            "train_batch_size",
            "micro_rollout_batch_size",
            "bf16",
            "gradient_checkpointing",
            "attn_implementation",
            "share_prompts",
            "device",
            "learner",
            "zero_stage",
            "adam_offload",
            "param_offload",
        ),
    ),
    "async": (
        "asynchronous actor-learner",
        ("async_train", "max_staleness", "importance_sampling_correction", "importance_sampling_cap"),
    ),
    "lora": ("LoRA", ("lora_rank", "lora_alpha", "lora_dropout", "target_modules", "save_merged")),
    "ray": (
        "Ray and vLLM engines",
        (
            "ray",
            "ray_address",
            "actor_num_nodes",
            "actor_num_gpus_per_node",
            "ref_num_nodes",
            "ref_num_gpus_per_node",
            "reward_num_nodes",
            "reward_num_gpus_per_node",
            "vllm_num_engines",
            "vllm_tensor_parallel_size",
            "vllm_gpu_memory_utilization",
            "vllm_enable_sleep",
            "vllm_kv_cache_gib",
            "vllm_enforce_eager",
            "colocate_all_models",
        ),
    ),
}
ALWAYS = ("run",)  # every recipe has a run
SECTION_OF = {name: sec for sec, (_, names) in SECTIONS.items() for name in names}


def declared(cls) -> tuple[str, ...]:
    """The sections ``cls`` (a recipe's config class) honours; unknown names are a bug."""
    secs = tuple(getattr(cls, "SECTIONS", None) or SECTIONS)
    bad = [s for s in secs if s not in SECTIONS]
    if bad:
        raise TypeError(
            f"{cls.__module__}.{cls.__name__}.SECTIONS: unknown section(s) {bad}; known: {', '.join(SECTIONS)}"
        )
    return tuple(dict.fromkeys(ALWAYS + secs))


def honours(cls, section: str) -> bool:
    return section in declared(cls)


def section_of(name: str) -> str | None:
    """The section of common option ``name``; None for a recipe's own options."""
    return SECTION_OF.get(name)


def ignored(cls) -> dict[str, str]:
    """The options ``cls`` does not honour (name and aliases -> their section)."""
    have = set(declared(cls))
    out = {}
    for f in dataclasses.fields(cls):
        sec = SECTION_OF.get(f.name)
        if sec is not None and sec not in have:
            for n in (f.name, *aliases_of(f.name)):
                out[n] = sec
    return out


def refusal(recipe: str, section: str) -> str:
    """Why an option of ``section`` is refused: the recipe does not honour that section."""
    return (
        f"is not used by recipe '{recipe}' (it does not read the '{SECTIONS[section][0]}' "
        f"options); leave it out, or pick a recipe that uses it"
    )
