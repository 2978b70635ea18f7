"""The recipe registry: recipe names to their packages, loaded by name on first use.

Configuration, reporting, evaluation and the run ask it for a recipe's config class, ``Recipe``
class or one of its modules (``recipe_module``), so none of them imports a recipe; a recipe package (``serl/recipes/NAME/``) has ``config.py``
(its option section, light to import: ``--help`` and config parsing load it) and ``recipe.py``
(the ``Recipe`` subclass). Add a line to ``RECIPES``, or ``register`` one from outside serl;
see docs/recipes.md.
"""

from __future__ import annotations

import importlib
from functools import cache

# name -> package; the package's config.py defines ``Config``, its recipe.py ``Recipe``.
RECIPES: dict[str, str] = {
    "serl": "serl.recipes.serl",
    "spin": "serl.recipes.spin",
    "spiral": "serl.recipes.spiral",
    "spell": "serl.recipes.spell",
}


def recipe_names() -> list[str]:
    return list(RECIPES)


def register(name: str, package: str) -> None:
    """Add a recipe from outside serl (a user's package); its modules load on first use."""
    RECIPES[name] = package
    config_class.cache_clear()


def _package(name: str) -> str:
    if name not in RECIPES:
        raise KeyError(f"unknown recipe {name!r}; known: {', '.join(RECIPES)}")
    return RECIPES[name]


@cache
def config_class(name: str):
    """The recipe's config dataclass: the common ``TrainConfig`` plus its own section."""
    cls = importlib.import_module(_package(name) + ".config").Config
    if getattr(cls, "RECIPE", None) != name:
        raise TypeError(f"{cls.__module__}.Config.RECIPE must be {name!r}")
    return cls


def recipe_class(name: str):
    """The recipe's ``Recipe`` subclass (imports torch and the engines)."""
    return importlib.import_module(_package(name) + ".recipe").Recipe


def recipe_module(name: str, module: str):
    """Another module of a recipe's package, for the shared code that serves that recipe alone
    (``serl eval --games`` is SPIRAL's ``evaluate``, a resume reads SeRL's ``instruct.pool``)."""
    return importlib.import_module(f"{_package(name)}.{module}")
