"""serl: self-play reinforcement learning for language models.

The package's root also holds the errors that mean "the user's input is wrong": one message, exit
code 2. They live here, at the bottom of the package, so that any module can raise them without
importing the module that reads that kind of input (those modules export them too:
``serl.config.options.ConfigError``, ``serl.data.seeds.DataError``, ``serl.models.resolve.ModelError``).
"""

from __future__ import annotations

__version__ = "0.1.0"


class ConfigError(ValueError):
    """A bad option; the message names the field (and file, when it came from YAML)."""


class DataError(ValueError):
    """Bad seed or benchmark data; the message names file, line and key."""


class ModelError(ValueError):
    """A model spec that cannot be resolved (bad path, missing package)."""
