from pathlib import Path

import pytest

from serl.engines.base import Completion
from serl.rewards import EquivalenceChecker

# The shared data sits next to the repository: ROOT/../shared/data.
DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
MATH_DIR = DATA / "serl_math_benchmarks"
MMLU_DIR = DATA / "mmlu_pro"


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The real-model tests share a small machine: one intra-op thread avoids the
    spin-wait slowdowns of oversubscribed cores. Restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def checker():
    """One real math-verify pool for the eval tests."""
    ch = EquivalenceChecker(timeout=2.0, workers=1)
    yield ch
    ch.close()


class ScriptedGenerator:
    """A Generator whose answers are written in the test, so every metric can be
    worked out by hand. ``greedy[prompt]`` is the greedy text, ``samples[prompt]``
    the list of sampled texts (cycled if shorter than n); a prompt is text or token ids."""

    def __init__(self, greedy: dict, samples: dict, tokenizer=None):
        key = self._key
        self.greedy, self.samples = {key(p): v for p, v in greedy.items()}, {key(p): v for p, v in samples.items()}
        self.tokenizer, self.calls = tokenizer, []

    def _key(self, p):
        """Prompts arrive as token ids: keyed by their text when a tokenizer is given, else as a tuple."""
        if isinstance(p, str):
            return p
        tok = getattr(self, "tokenizer", None)
        return tok.decode(list(p)) if tok is not None else tuple(p)

    def generate(self, prompts, n, sampling):
        self.calls.append((list(prompts), n, sampling))
        out = []
        for p in map(self._key, prompts):
            texts = (
                [self.greedy[p]] * n
                if sampling.greedy
                else [self.samples[p][j % len(self.samples[p])] for j in range(n)]
            )
            out.append([Completion(text=t, token_ids=[1] * len(t.split()), prompt_ids=[0]) for t in texts])
        return out

    def load_weights(self, named_tensors):
        pass

    def close(self):
        pass


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"shared data not found: {path}")
    return path


@pytest.fixture
def math_dir() -> Path:
    return _need(MATH_DIR)


@pytest.fixture
def mmlu_dir() -> Path:
    return _need(MMLU_DIR)


@pytest.fixture
def gsm8k_raw() -> Path:
    """The original GSM8K test file (answers in the ``#### N`` form)."""
    return _need(DATA / "gsm8k" / "test.jsonl")


@pytest.fixture
def scripted():
    return ScriptedGenerator
