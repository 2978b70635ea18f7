"""Policy snapshots: bf16 weight files, and a switcher that serves either the learner's current weights
or a saved snapshot from one generator (any ``Generator`` with ``load_weights``). The population of
past selves (``serl.recipes.spiral.population``) and ``serl eval --games`` against a snapshot use it.

A snapshot is one ``.safetensors`` file of the policy's weights (Hugging Face parameter names, as
``Learner.named_weights`` yields them) in bf16, written through a temporary name and a rename. A fixed
opponent may also be a Hugging Face model directory of the same architecture (its ``*.safetensors``).

``WeightSwitcher`` remembers which weights the generator serves and loads only on a change; snapshots
read from disk stay in a cache until ``clear()`` (once per training step), so an opponent met in every
round of a step is read once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

CURRENT = "current"  # the learner's own, live weights (SPIRAL's population names them so, too)


def save_snapshot(named_weights: Iterable[tuple[str, torch.Tensor]], path: str | Path) -> Path:
    """Write the weights to ``path`` in bf16 (atomically); returns the path."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {name: t.detach().to("cpu", torch.bfloat16).contiguous() for name, t in named_weights}
    if not tensors:
        raise ValueError(f"snapshot {path}: no weights to save")
    tmp = path.with_name(f".{path.name}.tmp")
    save_file(tensors, str(tmp))
    os.replace(tmp, path)
    return path


def load_snapshot(path: str | Path) -> dict[str, torch.Tensor]:
    """The weights of a snapshot file, or of every ``*.safetensors`` in a model directory."""
    from safetensors.torch import load_file

    path = Path(path)
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise FileNotFoundError(f"snapshot {path}: no .safetensors weights there")
    out: dict[str, torch.Tensor] = {}
    for f in files:
        out.update(load_file(str(f)))
    return out


class WeightSwitcher:
    """Serves ``CURRENT`` (weights from ``current()``) or a snapshot by path from one generator."""

    def __init__(self, generator, current: Callable[[], Iterable[tuple[str, torch.Tensor]]]) -> None:
        self.generator, self.current = generator, current
        self.loaded = CURRENT  # what the generator serves now
        self.cache: dict[str, dict[str, torch.Tensor]] = {}
        self.loads = 0  # generator.load_weights calls made
        self.reads = 0  # snapshot files read from disk

    def use(self, key: str) -> None:
        """Make the generator serve ``key``: ``CURRENT`` or a snapshot path."""
        if key == self.loaded:
            return
        if key == CURRENT:
            weights = self.current()
        else:
            if key not in self.cache:
                self.cache[key] = load_snapshot(key)
                self.reads += 1
            weights = self.cache[key].items()
        self.generator.load_weights(weights)
        self.loaded = key
        self.loads += 1

    def serving_current(self) -> None:
        """The caller has just loaded the current weights itself (a weight sync)."""
        self.loaded = CURRENT

    def clear(self) -> None:
        self.cache.clear()
