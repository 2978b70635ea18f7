"""The SPELL recipe's options (Yang et al., "SPELL: Self-Play Reinforcement Learning for
Evolving Long-Context Language Models", Tongyi-Zhiwen 2025).

Common options keep their meaning, read per SPELL role: ``--rollout_batch_size`` is the
number of questions (one per document cluster) trained per step after dynamic sampling,
``--n_samples_per_prompt`` the responder's samples per question (8 upstream),
``--generate_max_len`` the responder's new tokens, ``--prompt_max_len`` the budget of the
responder's prompt (longer paragraphs are skipped and counted; clusters are split to fit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from serl import ConfigError
from serl.config.options import TrainConfig, option
from serl.config.plan import RecipeSpec
from serl.recipes.spell.plots import plot_roles
from serl.report.panels import Report


@dataclass
class SpellOptions:
    corpus: str = option(
        "dataset/docs_train.jsonl",
        "documents: a folder or a file of text (.txt, .md, .rst, man pages), JSONL or Parquet",
    )
    corpus_text_key: str = option(
        "text", "JSON key (Parquet: column) of a document's text in JSONL and Parquet corpora"
    )
    corpus_cluster_key: str = option(
        "cluster", "JSON key (Parquet: column) grouping documents into clusters ('' = none)"
    )
    cluster_size: int = option(6, "paragraphs per document cluster (the responder's context)")
    paragraphs_per_prompt: int = option(2, "new paragraphs shown to the questioner per prompt")
    compact_prompts: bool = option(True, "short prompts for models under ~1B parameters")
    few_shot_questioner: bool = option(False, "show the questioner one worked JSON example (bootstrap)")
    questioner_prefill: str = option(
        "auto",
        "start the questioner's reply with '{\"question\": \"' so a small "
        "model only continues the JSON block: auto (= on with compact "
        "prompts), on, off",
        choices=("auto", "on", "off"),
    )
    verifier_prefill: str = option(
        "auto",
        "start the verifier's reply with '[[' so a small model goes on "
        "with the verdict: auto (= on with compact prompts), on, off",
        choices=("auto", "on", "off"),
    )
    questioner_max_len: int = option(128, "max new tokens of a questioner reply")
    questioner_temperature: float = option(
        1.0, "sampling temperature of the questioner (the other roles: --temperature)"
    )
    verifier_max_len: int = option(64, "max new tokens of a verifier judgment")
    verifier_samples: int = option(3, "verifier judgments per response (k)")
    grounding_samples: int = option(4, "responder samples without documents for the grounding check")
    grounding_threshold: float = option(
        0.1, "a question is bad_ground when the no-document score reaches this (SPELL: 0.1)"
    )
    verifier_band: list = option([0.51, 0.99], "train the verifier where the majority's share lies in [low, high]")
    questioner_reward: str = option(
        "gaussian",
        "questioner's reward from the responder's mean score r (0 when "
        "r is 0 or 1): gaussian (SPELL, peak at 0.5), azr (Absolute Zero: "
        "1 - r) or rzero (R-Zero: 1 - 2|r - 0.5|)",
        choices=("gaussian", "azr", "rzero"),
    )
    memory_capacity: int = option(3, "history entries kept per cluster (SPELL: 3; 0 = no history memory)")
    responder_reward: str = option(
        "max",
        "max (SPELL: max of rule score and verifier majority) or rule (the rule "
        "score alone; the verifier still judges and trains)",
        choices=("max", "rule"),
    )
    verifier_warmup_steps: int = option(0, "first steps (of --steps) that train only the verifier, on labelled pairs")
    verifier_warmup_data: str = option(
        "dataset/docs_train_verify.jsonl",
        "the warm-up's training-side pairs (JSONL: question, candidate, gold; label: the rule score)",
    )
    verifier_warmup_pairs: int = option(16, "pairs per warm-up step, half rule-right and half rule-wrong")
    verifier_warmup_samples: int = option(8, "verdicts per pair in a warm-up step (one GRPO group)")
    novelty_threshold: float = option(
        0.7, "drop a question whose ROUGE-L F1 with an earlier one on its cluster exceeds this"
    )
    max_refill_rounds: int = option(2, "question rounds per step to refill groups with no reward spread")
    heldout_eval: bool = option(
        True, "evaluate the three roles on the held-out files below (before, after, every --eval_steps)"
    )
    eval_docs: str = option("dataset/docs_heldout.jsonl", "held-out document clusters (JSONL)")
    eval_qa_data: str = option("dataset/docs_heldout_qa.jsonl", "held-out gold questions for the responder")
    eval_verify_data: str = option("dataset/docs_heldout_verify.jsonl", "held-out labelled verifier items")
    eval_qa_limit: int = option(40, "held-out responder questions (0 = all 120 of the shipped file)")
    eval_verify_limit: int = option(40, "held-out verifier items (0 = all 240 of the shipped file)")
    eval_questioner_limit: int = option(8, "held-out clusters the questioner writes for (0 = all 20)")


@dataclass
class Config(SpellOptions, TrainConfig):
    """SPELL: one policy as questioner, responder and verifier over document clusters."""

    RECIPE: ClassVar[str] = "spell"
    SPEC: ClassVar[RecipeSpec] = RecipeSpec(
        resume_fixed=(
            "corpus",
            "cluster_size",
            "paragraphs_per_prompt",
            "compact_prompts",
            "few_shot_questioner",
            "questioner_prefill",
            "verifier_samples",
            "grounding_samples",
            "memory_capacity",
            "prompt_max_len",
            "responder_reward",
            *(f"verifier_warmup_{k}" for k in ("steps", "data", "pairs", "samples")),
        )
    )
    # its data is the corpus, its evaluation and rewards its own (the checker: cover-EM)
    SECTIONS: ClassVar[tuple[str, ...]] = (
        "run",
        "rollout",
        "checker",
        "generation",
        "advantage",
        "kl",
        "learner",
        "lora",
        "ray",
        "async",
    )
    REPORT: ClassVar[Report] = Report(
        plots=("reward",),
        figures=(("roles", plot_roles),),
        main=(
            "questioner/valid_json",
            "questioner/bad_ground",
            "questioner/informative",
            "responder/accuracy",
            "verifier/agreement",
            "verifier/bad_format",
        ),
        line=(
            ("responder/accuracy", "acc"),
            ("questioner/valid_json", "valid"),
            ("verifier/agreement", "verify"),
            ("loss/policy", "loss"),
        ),
    )
    # common options with SPELL's defaults (each keeps its type and place: TrainConfig.DEFAULTS)
    DEFAULTS: ClassVar[dict] = dict(
        rollout_batch_size=option(8, "questions (one per sampled cluster) trained per step"),
        n_samples_per_prompt=option(8, "responder samples per question (SPELL: 8)"),
        generate_max_len=option(128, "max new tokens of a responder reply"),
        temperature=option(1.0, "sampling temperature of the responder and the verifier"),
        system_prompt=option("", "instruction appended to every prompt (SPELL's prompts need none)"),
        advantage_estimator=option("group_norm", "GRPO: group-normalised advantages per role"),
        init_kl_coef=option(0.0, "KL coefficient (0: no reference model)"),
        actor_learning_rate=option(1e-6, "AdamW learning rate"),
    )

    def validate_recipe(self) -> None:
        lo_hi = self.verifier_band
        if len(lo_hi) != 2 or not 0.0 <= float(lo_hi[0]) <= float(lo_hi[1]) <= 1.0:
            raise ConfigError(f"verifier_band: need two numbers 0 <= low <= high <= 1, got {lo_hi}")
        for name in (
            "cluster_size",
            "paragraphs_per_prompt",
            "questioner_max_len",
            "verifier_max_len",
            "verifier_samples",
            "grounding_samples",
            "max_refill_rounds",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name, low in (
            ("memory_capacity", 0),
            ("verifier_warmup_steps", 0),
            ("verifier_warmup_pairs", 2),
            ("verifier_warmup_samples", 2),
        ):
            if getattr(self, name) < low:
                raise ConfigError(f"{name}: must be >= {low}, got {getattr(self, name)}")
        for name in ("questioner_max_len", "verifier_max_len"):
            if getattr(self, name) > self.generate_max_len:  # vLLM's context is prompt + generate_max_len
                raise ConfigError(
                    f"{name}: must be <= generate_max_len ({self.generate_max_len}), got {getattr(self, name)}"
                )
        if self.questioner_temperature < 0:
            raise ConfigError(f"questioner_temperature: must be >= 0, got {self.questioner_temperature}")
        if not 0.0 < self.grounding_threshold <= 1.0:
            raise ConfigError(f"grounding_threshold: must lie in (0, 1], got {self.grounding_threshold}")
        if not 0.0 < self.novelty_threshold <= 1.0:
            raise ConfigError(f"novelty_threshold: must lie in (0, 1], got {self.novelty_threshold}")
        for name in ("eval_qa_limit", "eval_verify_limit", "eval_questioner_limit"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}: must be >= 0 (0 = all), got {getattr(self, name)}")
        if self.prompt_max_len < 128:
            raise ConfigError(f"prompt_max_len: SPELL needs room for documents, got {self.prompt_max_len} (< 128)")
