import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "offline")


@pytest.fixture(scope="session")
def smol_path():
    """The embedded SmolLM2-135M-Instruct as a Hugging Face directory (converted once)."""
    from serl.models import resolve_model

    try:
        return resolve_model("smollm2")
    except Exception as e:  # the package is part of the install; say why if it is not there
        pytest.skip(f"embedded model unavailable: {e}")


@pytest.fixture(scope="session")
def smol_tokenizer(smol_path):
    from serl.models import load_tokenizer

    return load_tokenizer(smol_path)
