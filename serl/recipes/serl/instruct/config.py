"""Settings for self-instruction: few-shot prompts, sampling, text filters."""

from __future__ import annotations

from dataclasses import dataclass

from serl.recipes.serl.instruct.filters import DEFAULT_BANNED, DEFAULT_BANNED_STARTS
from serl.recipes.serl.instruct.template import DEFAULT_TEMPLATE


@dataclass
class InstructConfig:
    n_shots: int = 8
    """Example problems per few-shot prompt."""
    max_generated_shots: int = 2
    """At most this many examples come from generated problems the run has kept; the rest are seeds."""
    temperature: float = 0.8
    """Sampling temperature for problem generation (its own, not the rollout's)."""
    top_p: float = 0.95
    """Nucleus sampling for problem generation."""
    presence_penalty: float = 1.0
    """Presence penalty for problem generation, where the engine has one (vLLM does, HF does not)."""
    max_new_tokens: int = 256
    """Token budget of one few-shot completion (it holds several numbered problems)."""
    prompts_per_call: int = 16
    """Few-shot prompts (each with fresh examples) sent in one ``generate`` call."""
    samples_per_prompt: int = 1
    """Completions sampled per few-shot prompt."""
    max_attempts: int = 8
    """Most ``generate`` calls one ``propose`` makes before giving up short (and logging it)."""
    one_call: bool = False
    """Size each call to what is still needed instead of ``prompts_per_call``: 1.25 times as
    many prompts as the run's accepted problems per prompt so far say will do (one per problem
    before any history), within the ``prompts_per_call * max_attempts`` prompts the fixed calls could
    have sent. A round then usually takes one engine call instead of several in a row."""
    min_words: int = 4
    """Candidates with fewer words are rejected."""
    max_words: int = 150
    """Candidates with more words are rejected."""
    rouge_threshold: float = 0.7
    """Reject a candidate whose ROUGE-L F1 with any known problem exceeds this."""
    banned_words: tuple[str, ...] = DEFAULT_BANNED
    """Whole words/phrases (case-insensitive) pointing at things a text model cannot see or do."""
    banned_starts: tuple[str, ...] = DEFAULT_BANNED_STARTS
    """Phrases a candidate may not start with (case-insensitive)."""
    allowed_start_punct: str = "$"
    """Punctuation that may open a candidate (all other punctuation may not): "$" opens LaTeX."""
    template: str = DEFAULT_TEMPLATE
    """Few-shot template: a name in prompts/ or a path; needs {examples} and {next}."""
    max_prompt_tokens: int = 0
    """Most tokens of a few-shot prompt: the longest examples are left out until it fits,
    and a prompt that fits with no example is not sent (0 = no limit)."""
    chat_format: bool = False
    """Wrap the list in the chat template (user turn, assistant pre-filled with the next
    number) instead of raw text continuation; raw measured better on SmolLM2 (docs)."""

    def __post_init__(self):
        if self.n_shots < 1 or not 0 <= self.max_generated_shots <= self.n_shots:
            raise ValueError(
                f"need n_shots >= 1 and 0 <= max_generated_shots <= n_shots, "
                f"got {self.n_shots}, {self.max_generated_shots}"
            )
        if self.min_words > self.max_words:
            raise ValueError(f"min_words {self.min_words} > max_words {self.max_words}")
        if not 0.0 <= self.rouge_threshold <= 1.0:
            raise ValueError(f"rouge_threshold must be in [0, 1], got {self.rouge_threshold}")
        for name in ("prompts_per_call", "samples_per_prompt", "max_attempts", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
