"""Maps the repository's dataset/, prompts/ and configs/ into the wheel as serl/shipped/*.

Everything else is declared in pyproject.toml. The three folders stay at the top level of
the repository (where the docs and configs name them); only the built package gets a
copy, which serl.shipped finds with importlib.resources.
"""
from setuptools import find_packages, setup

SHIPPED = {"dataset": ["*.jsonl"], "prompts": ["*.txt", "*.md"], "configs": ["*.yaml"]}

setup(
    packages=find_packages(include=["serl", "serl.*"]) + [f"serl.shipped.{d}" for d in SHIPPED],
    package_dir={f"serl.shipped.{d}": d for d in SHIPPED},
    package_data={f"serl.shipped.{d}": globs for d, globs in SHIPPED.items()},
)
