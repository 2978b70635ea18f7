"""Typed run configuration: one dataclass, one doc line per field, YAML + CLI overrides.

Flag names follow SeRL/OpenRLHF where one exists (``--pretrain``, ``--prompt_data``,
``--n_samples_per_prompt``, ...), so their shell templates run unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import ClassVar

from serl import ConfigError
from serl.config.plan import RecipeSpec
from serl.engines.lora_targets import ALL_LINEAR, parse_targets


def _f(default, doc: str, choices: tuple | None = None, const=None, **kw):
    # const: the value of the bare flag (``--bf16`` alone means true, as in OpenRLHF); an option's
    # other spellings live in serl.config.compat_flags.ALIASES, not here
    md = {"help": doc, "choices": choices, "const": const}
    if isinstance(default, list):
        return field(default_factory=functools.partial(list, default), metadata=md)
    return field(default=default, metadata=md)


option = _f  # for recipes: ``name: int = option(3, "one-line doc shown by --help")``


def _own_defaults(cls) -> None:
    """``cls.DEFAULTS`` as fields of ``cls``: each named option of a base class, re-made with the new
    default (and help line, when given) in the class body that @dataclass reads next."""
    own = cls.__dict__.get("DEFAULTS")
    if not own:
        return
    inherited = {
        f.name: f
        for base in reversed(cls.__mro__[1:])
        if dataclasses.is_dataclass(base)
        for f in dataclasses.fields(base)
    }
    annotations = dict(cls.__dict__.get("__annotations__", {}))
    for name, value in own.items():
        if name not in inherited:
            raise TypeError(f"{cls.__module__}.{cls.__name__}.DEFAULTS: {name!r} is no common option")
        f, doc = inherited[name], None
        if isinstance(value, dataclasses.Field):  # option(value, doc)
            doc = value.metadata.get("help")
            value = value.default_factory() if value.default_factory is not dataclasses.MISSING else value.default
        md = f.metadata
        annotations[name] = f.type
        setattr(cls, name, _f(value, doc or md.get("help", ""), choices=md.get("choices"), const=md.get("const")))
    cls.__annotations__ = annotations


@dataclass
class TrainConfig:
    """Options every recipe shares; a recipe adds its own section (serl/recipes/NAME/config.py)."""

    # the sections of common options a recipe honours (serl.config.sections; None: all), and the
    # recipe's per-run rules (serl.config.plan.RecipeSpec: objective, KL modes, reference, ...)
    SECTIONS: ClassVar[tuple[str, ...] | None] = None
    SPEC: ClassVar[RecipeSpec] = RecipeSpec()
    # a recipe's own defaults for common options, in one place: {name: value, or option(value, its
    # --help line)}; the option keeps its type, place, other spellings and choices (``_own_defaults``)
    DEFAULTS: ClassVar[dict] = {}

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        _own_defaults(cls)  # before @dataclass reads the subclass's fields

    recipe: str = _f(
        "serl", "training recipe (serl/recipes/NAME); `serl train --recipe NAME --help` lists its own options"
    )
    # --- what to train and on what
    model: str = _f(
        "smollm2",
        "policy: 'smollm2' (embedded), 'qwen2.5-coder-0.5b' (opt-in, "
        "requirements/qwen2.5-coder-0.5b.txt), a .gguf file, an HF directory or hub id",
    )
    prompt_data: str = _f(
        "dataset/arith_seed.jsonl",
        "seed problems: a JSONL or Parquet file, or a Hugging Face "
        "dataset (save_to_disk folder, data files, or hub id such as openai/gsm8k:main)",
    )
    input_key: str = _f("problem", "JSON key of the problem text in the seed file")
    label_key: str = _f(
        "answer",
        "JSON key of the label (used only by the rule reward); a dotted key reads a "
        "nested one; rows without 'answer' fall back to verl's reward_model.ground_truth",
    )
    output_key: str = _f("", "JSON key of the human answer / worked solution (SFT, SPIN); '' = none")
    prompt_split: str = _f("train", "split to read when --prompt_data is a Hugging Face dataset")
    max_samples: int = _f(0, "use at most this many seed problems (0 = all)")
    run_dir: str = _f("", "run directory (default: runs/serl-<time>)")
    seed: int = _f(42, "random seed for sampling, shuffling and generation")
    eval_data: str = _f(
        "",
        "held-out labelled problems scored (greedy) before and after training (a "
        "file, dataset folder or hub id, as --prompt_data)",
    )
    eval_split: str = _f(
        "",
        "split of --eval_data ('' = 'test' for dataset folders with splits and hub "
        "ids; a single file or saved Dataset is read whole)",
    )
    eval_samples: int = _f(32, "use at most this many held-out problems (0 = all)")
    eval_benchmarks: str = _f("", "comma-separated benchmark names under --eval_data_dir (e.g. math_500,gsm8k)")
    eval_data_dir: str = _f("", "folder of <benchmark>/test.jsonl files (the SeRL benchmark layout)")
    eval_limit: int = _f(50, "use the first N problems of each benchmark (0 = all)")
    eval_steps: int = _f(0, "evaluate every N steps as well as before and after (0 = before and after only)")
    eval_k: int = _f(0, "also sample K answers per problem for maj@K and pass@K (0 = greedy only)")
    # --- loop size
    steps: int = _f(3, "training steps (what one step does is the recipe's: rollout, reward, update, sync)")
    max_minutes: float = _f(
        0.0,
        "wall-clock budget of the training steps in minutes (loading, evaluation and "
        "checkpoints not counted; kept across --resume): the run stops after the "
        "step that reaches it, with a checkpoint; 0 = no limit",
    )
    rollout_batch_size: int = _f(4, "prompts (problems, questions) trained on per step")
    n_samples_per_prompt: int = _f(4, "responses sampled per prompt (one group)")
    # --- reward
    reward_mode: str = _f(
        "majority",
        "majority vote (no labels), rule (labels) or auto (label if any)",
        choices=("majority", "rule", "auto"),
    )
    answer_fallback: str = _f(
        "number", "when there is no \\boxed{}: number (last number) or none", choices=("number", "none", "choice")
    )
    verify_timeout: float = _f(3.0, "hard timeout in seconds for one math-verify check")
    # --- generation
    generator: str = _f(
        "auto", "generation engine: auto (vllm if installed), vllm or hf", choices=("auto", "vllm", "hf")
    )
    generator_dtype: str = _f(
        "auto",
        "generator dtype (vLLM or transformers): auto (bfloat16 where the hardware "
        "computes it natively, else float32), bfloat16, float16, float32",
        choices=("auto", "bfloat16", "float16", "float32"),
    )
    generate_max_len: int = _f(256, "max new tokens per response")
    show_engine_warnings: bool = _f(
        False, "print vLLM's own log lines (warnings included) on the terminal; off: they go to RUN_DIR/engine.log"
    )
    prompt_max_len: int = _f(
        1024,
        "max prompt tokens, and at most the model's context minus generate_max_len "
        "(longer prompts are skipped and counted, named by file and line)",
    )
    temperature: float = _f(1.0, "rollout sampling temperature")
    top_p: float = _f(1.0, "rollout nucleus sampling")
    system_prompt: str = _f(
        "Please reason step by step, and put your final answer within \\boxed{}.",
        "instruction appended to each problem in the chat template",
    )
    # --- algorithm
    advantage_estimator: str = _f("reinforce", "reinforce | reinforce_baseline | group_norm | dr_grpo | rloo")
    init_kl_coef: float = _f(1e-4, "KL coefficient (in the reward, or the loss with --use_kl_loss)")
    use_kl_loss: bool = _f(False, "put the KL term in the loss instead of the reward")
    kl_estimator: str = _f("k3", "KL estimator for the loss term: k1, k2 or k3")
    kl_clip: float = _f(10.0, "cap on each token's KL estimate, in the loss and the reward (docs/algorithms.md)")
    gamma: float = _f(1.0, "discount of the token-level return")
    eps_clip: float = _f(0.2, "PPO clip range")
    actor_learning_rate: float = _f(5e-7, "AdamW learning rate")
    lr_warmup_ratio: float = _f(0.03, "share of steps spent warming up the learning rate")
    min_lr_ratio: float = _f(0.1, "cosine schedule floor, as a share of the learning rate")
    max_norm: float = _f(1.0, "gradient clipping norm")
    micro_train_batch_size: int = _f(4, "sequences per forward/backward pass")
    train_max_tokens_per_gpu: int = _f(
        0,
        "> 0: cut the learner's micro-batches by this many tokens instead of "
        "--micro_train_batch_size sequences (OpenRLHF's dynamic batch)",
    )
    train_batch_size: int = _f(
        0,
        "sequences per optimizer step: the rollout is trained in shuffled "
        "mini-batches of this size (0 = one step over the whole rollout)",
    )
    micro_rollout_batch_size: int = _f(16, "sequences per log-prob pass during experience making")
    bf16: str = _f(
        "auto",
        "learner precision: auto (bf16 where the hardware computes it natively: AMX or "
        "AVX-512-BF16 CPUs, sm_80+ GPUs; else fp32), true (bf16 weights, fp32 master copy in "
        "the optimizer), false; bare --bf16 means true",
        choices=("auto", "true", "false"),
        const="true",
    )
    gradient_checkpointing: bool = _f(False, "recompute activations in backward to save memory")
    attn_implementation: str = _f(
        "auto",
        "learner attention: auto (flash-attn varlen on CUDA with bf16 when "
        "installed, else SDPA; CPU unchanged), eager, sdpa, flash_attention_2",
        choices=("auto", "eager", "sdpa", "flash_attention_2"),
    )
    share_prompts: bool = _f(
        False,
        "learner: write each distinct prompt once per packed micro-batch, its "
        "responses after it (a GRPO group's long prompt runs once, not n times); "
        "a micro-batch then holds up to micro_train_batch_size x the longest "
        "sequence in tokens",
    )
    # --- the asynchronous actor-learner (docs/async.md)
    async_train: bool = _f(False, "generate step t+1 while step t updates (one policy version of lag)")
    max_staleness: int = _f(1, "with --async_train: drop samples more than N policy versions old (>= 1)")
    importance_sampling_correction: bool = _f(
        False,
        "multiply each token's loss by min(exp(logp_old - logp_behaviour), cap), the generator's "
        "log-probs as behaviour (truncated importance sampling)",
    )
    importance_sampling_cap: float = _f(2.0, "the cap of the importance weights (TRL's default 2.0)")
    # --- LoRA (peft): train low-rank adapters on the frozen model instead of all its weights
    lora_rank: int = _f(0, "LoRA rank (0 = full fine-tuning); the reference is the base with the adapter off")
    lora_alpha: float = _f(16.0, "LoRA scale: the adapter's update is (lora_alpha / lora_rank) * B @ A")
    lora_dropout: float = _f(0.0, "dropout on the LoRA branch's input during updates")
    target_modules: str = _f(
        ALL_LINEAR,
        "modules that get adapters: all-linear (every linear layer of "
        "the attention and MLP blocks) or comma-separated names (q_proj,v_proj)",
    )
    save_merged: bool = _f(
        False,
        "with LoRA: also save the final policy with the adapter merged in, in "
        "Hugging Face layout, under RUN_DIR/model_merged",
    )
    # --- logging and checkpoints
    progress: str = _f("auto", "progress display: auto, bar, plain or quiet", choices=("auto", "bar", "plain", "quiet"))
    use_wandb: bool = _f(False, "log to Weights & Biases: true, or the API key (OpenRLHF's --use_wandb KEY)")
    wandb_project: str = _f("serl", "W&B project")
    wandb_run_name: str = _f("", "W&B run name (default: the run directory's name)")
    use_tensorboard: str = _f("", "TensorBoard log directory (empty = off)")
    save_steps: int = _f(
        1, "write a checkpoint every N steps (and at the end); 0 (or -1, as OpenRLHF) = only at the end"
    )
    max_ckpt_num: int = _f(2, "keep the newest N checkpoints")
    save_best: str = _f(
        "",
        "keep the policy of the step with the best value of this evaluation metric (e.g. "
        "eval/gsm8k/pass@1) in RUN_DIR/best; '' = off",
    )
    save_model: bool = _f(
        True,
        "save the final policy under RUN_DIR/model: weights, config and tokenizer in "
        "Hugging Face layout (LoRA: the adapter in PEFT layout); no optimizer state",
    )
    report: bool = _f(
        True,
        "draw RUN_DIR/report/ (plots and summary.md) when the run ends, several seconds "
        "on a CPU; `serl report RUN_DIR` draws it at any time",
    )
    # --- devices, distributed and SeRL compatibility (engines, Ray)
    device: str = _f(
        "auto",
        "where the learner, reference and transformers generator run: auto (cuda when available), cpu or cuda",
        choices=("auto", "cpu", "cuda"),
    )
    learner: str = _f(
        "torch", "learner engine: torch (one process) or deepspeed (ZeRO)", choices=("torch", "deepspeed")
    )
    zero_stage: int = _f(2, "DeepSpeed ZeRO stage for the deepspeed learner", choices=(1, 2, 3))
    adam_offload: bool = _f(False, "deepspeed: keep Adam states on the CPU (ZeRO optimizer offload)")
    param_offload: bool = _f(False, "deepspeed: keep parameters on the CPU (ZeRO-3 parameter offload)")
    ckpt_path: str = _f("", "SeRL flag, accepted for its scripts; checkpoints go to RUN_DIR/checkpoints")
    ray: bool = _f(False, "run generator, learner group and reference model as Ray actors")
    ray_address: str = _f("", "Ray cluster to join ('' = the job's cluster or a new local one)")
    actor_num_nodes: int = _f(1, "Ray: nodes for the policy learner group")
    actor_num_gpus_per_node: int = _f(1, "Ray: learner ranks per node (one GPU each, or one CPU slot)")
    ref_num_nodes: int = _f(1, "Ray: nodes for the reference model")
    ref_num_gpus_per_node: int = _f(1, "Ray: reference-model workers per node")
    reward_num_nodes: int = _f(1, "Ray: nodes for the reward workers (SeRL flag; rewards need no GPU)")
    reward_num_gpus_per_node: int = _f(1, "Ray: reward workers per node")
    vllm_num_engines: int = _f(1, "Ray: generation engines (rollouts are split between them)")
    vllm_tensor_parallel_size: int = _f(1, "GPUs per vLLM engine (tensor parallel)")
    vllm_gpu_memory_utilization: float = _f(0.85, "share of GPU memory a vLLM engine may take")
    vllm_enable_sleep: bool = _f(False, "free vLLM GPU memory between rollouts (GPU only)")
    vllm_kv_cache_gib: float = _f(
        2.0,
        "CPU only: GiB a vLLM engine reserves for its KV cache (fractions "
        "allowed; it must hold one prompt_max_len + generate_max_len sequence)",
    )
    vllm_enforce_eager: bool = _f(
        True,
        "vLLM in eager mode; false: torch.compile at engine start (on a 2-core CPU "
        "~50 s more start-up for ~6 percent faster generation: for long runs)",
    )
    colocate_all_models: bool = _f(False, "Ray: learner, reference and engines share the same GPUs")

    def __post_init__(self) -> None:
        self.recipe = getattr(type(self), "RECIPE", self.recipe)  # a recipe's config knows its name
        from serl.engines.precision import bf16_setting

        try:  # YAML's true/false and saved configs of older runs (a bool) read as true/false
            self.bf16 = bf16_setting(self.bf16)
        except ValueError as e:
            raise ConfigError(f"bf16: {e}") from None

    def validate(self) -> None:
        from serl.config.numbers import check_numbers
        from serl.config.registry import recipe_names

        check_numbers(self)  # finite, in range: before anything reads a value

        if self.recipe not in recipe_names():
            raise ConfigError(f"recipe: unknown recipe {self.recipe!r}; known: {', '.join(recipe_names())}")
        for name in (
            "steps",
            "rollout_batch_size",
            "n_samples_per_prompt",
            "micro_train_batch_size",
            "generate_max_len",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.train_max_tokens_per_gpu < 0:
            raise ConfigError(
                f"train_max_tokens_per_gpu: must be >= 0 (0 = count micro-batches by "
                f"--micro_train_batch_size), got {self.train_max_tokens_per_gpu}"
            )
        if self.train_batch_size < 0:
            raise ConfigError(f"train_batch_size: must be >= 0 (0 = the whole rollout), got {self.train_batch_size}")
        from serl.algos import canonical_estimator

        try:
            est = canonical_estimator(self.advantage_estimator)
        except ValueError as e:
            raise ConfigError(f"advantage_estimator: {e}") from None
        from serl.config.plan import kl_mode

        kl = kl_mode(self)  # refuses a KL setting the recipe cannot train with
        if est in ("group_norm", "dr_grpo") and kl == "reward":
            raise ConfigError(
                f"advantage_estimator: {est} keeps the KL out of the reward; "
                f"add --use_kl_loss (as GRPO does) or set --init_kl_coef 0"
            )
        from serl.algos.kl import check_kl_clip

        try:
            check_kl_clip(self.kl_clip)
        except ValueError as e:
            raise ConfigError(f"kl_clip: {e}") from None
        if self.max_staleness < 1:
            raise ConfigError(
                f"max_staleness: must be >= 1 (the asynchronous pipeline itself lags one policy "
                f"version), got {self.max_staleness}"
            )
        if self.max_staleness != 1 and not self.async_train:
            raise ConfigError(
                "max_staleness: needs --async_train (a synchronous run samples with the policy it trains)"
            )
        if not self.importance_sampling_cap >= 1.0:
            raise ConfigError(
                f"importance_sampling_cap: must be >= 1 (a weight of 1 is on-policy), got "
                f"{self.importance_sampling_cap}"
            )
        if self.colocate_all_models and not self.ray:
            raise ConfigError("colocate_all_models: needs --ray (it places Ray actors on shared GPUs)")
        if self.vllm_enable_sleep and self.generator == "hf":
            raise ConfigError("vllm_enable_sleep: needs the vllm generator, but --generator is hf")
        if not self.vllm_kv_cache_gib > 0:
            raise ConfigError(f"vllm_kv_cache_gib: must be > 0, got {self.vllm_kv_cache_gib}")
        if self.param_offload and self.zero_stage != 3:
            raise ConfigError(f"param_offload: needs --zero_stage 3, got {self.zero_stage}")
        if self.max_minutes < 0:
            raise ConfigError(f"max_minutes: must be >= 0 (0 = no limit), got {self.max_minutes}")
        if self.eval_steps < 0 or self.eval_k < 0:
            raise ConfigError("eval_steps / eval_k: must be >= 0")
        if self.save_steps < 0:  # OpenRLHF's, OAT's and verl's -1: no periodic checkpoints (step % -1 saved every one)
            self.save_steps = 0
        if self.temperature < 0:
            raise ConfigError(f"temperature: must be >= 0, got {self.temperature}")
        self._validate_lora()
        if self.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise ConfigError("device: cuda was asked for, but torch sees no CUDA device")
        for f in dataclasses.fields(self):
            ch = f.metadata.get("choices")
            if ch and getattr(self, f.name) not in ch:
                raise ConfigError(f"{f.name}: must be one of {', '.join(map(str, ch))}, got {getattr(self, f.name)!r}")
        self.validate_recipe()

    def _validate_lora(self) -> None:
        if self.lora_rank < 0:
            raise ConfigError(f"lora_rank: must be >= 0 (0 = full fine-tuning), got {self.lora_rank}")
        if self.lora_rank and self.lora_alpha <= 0:
            raise ConfigError(f"lora_alpha: must be > 0, got {self.lora_alpha}")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ConfigError(f"lora_dropout: must lie in [0, 1), got {self.lora_dropout}")
        if self.save_merged and not self.lora_rank:
            raise ConfigError(
                "save_merged: needs --lora_rank > 0 (without LoRA, --save_model already writes the whole model)"
            )
        try:
            parse_targets(self.target_modules)
        except ValueError as e:
            raise ConfigError(str(e)) from None

    def validate_recipe(self) -> None:
        """Checks of the recipe's own options (a recipe's config section overrides this)."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def config_from_dict(values: dict) -> TrainConfig:
    """Rebuild a run's config from ``to_dict()`` output (Ray workers, saved runs)."""
    from serl.config.registry import config_class

    return config_class(values.get("recipe") or "serl")(**values)
