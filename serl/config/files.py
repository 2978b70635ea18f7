"""Config files: reading a YAML file of options for a recipe (errors name the file and,
for bad YAML, the line; options of other recipes and of sections the recipe does not
honour are refused), and writing a run's config.yaml atomically."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import typing
from pathlib import Path

from serl import ConfigError
from serl.config.compat_flags import aliases_of


def type_of(cls, f: dataclasses.Field):
    hints = typing.get_type_hints(cls)
    return hints[f.name]


def coerce(value, typ, where: str):
    try:
        if typ is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("1", "true", "yes", "on"):
                return True
            if str(value).lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if typ is list:
            return [float(v) for v in (value if isinstance(value, list) else [value])]
        if typ is int and isinstance(value, float) and not value.is_integer():
            raise ValueError(value)
        return typ(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected {typ.__name__}, got {value!r}") from None


def yes_no(v) -> str:
    """A word of a true/false/auto option (``--bf16``): YAML's booleans and yes/no/1/0/on/off as true/false."""
    if isinstance(v, bool):
        return "true" if v else "false"
    s = str(v).strip().lower()
    return {"1": "true", "yes": "true", "on": "true", "0": "false", "no": "false", "off": "false"}.get(s, s)


def read_yaml(path: str) -> tuple[Path, dict]:
    p, data, _ = read_yaml_text(path)
    return p, data


def _unique_key_loader():
    """A ``yaml.SafeLoader`` that refuses a key given twice in one mapping: plain YAML
    keeps the last value silently, so ``seed: 1`` ... ``seed: 2`` ran with 2 unnoticed."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen: dict = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":  # `<<:` may override, by design
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        first = seen.setdefault(key, key_node.start_mark.line + 1)
                    except TypeError:  # an unhashable key: the base class says so
                        continue
                    if first != key_node.start_mark.line + 1:
                        raise yaml.constructor.ConstructorError(
                            None,
                            None,
                            f"key {key!r} is given twice (first on line {first}); keep one",
                            key_node.start_mark,
                        )
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader


def read_yaml_text(path: str) -> tuple[Path, dict, str]:
    """(path, mapping, raw text); errors name the file and, for bad YAML, the line."""
    import yaml

    from serl.shipped import locate

    p = locate(path)  # configs/quickstart.yaml works from any directory
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    from serl.data.jsonl import read_utf8

    try:
        text = read_utf8(p, ConfigError)
    except OSError as e:
        raise ConfigError(f"{p}: cannot read ({e.strerror or e})") from None
    try:
        data = yaml.load(text, Loader=_unique_key_loader()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark is not None else str(p)
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        ctx, cmark = getattr(e, "context", None), getattr(e, "context_mark", None)
        if ctx and cmark is not None:
            what += f", {ctx} that begins on line {cmark.line + 1}"
        raise ConfigError(f"{where}: not valid YAML ({what})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping of option: value")
    return p, data, text


def _owner_of(name: str, cls) -> str | None:
    """The recipe whose own section has option ``name`` (None if no other recipe has it)."""
    from serl.config.registry import config_class, recipe_names

    own = {f.name for f in dataclasses.fields(cls)}
    for r in recipe_names():
        other = config_class(r)
        names = {f.name for f in dataclasses.fields(other)}
        names |= {a for f in dataclasses.fields(other) for a in aliases_of(f.name)}
        if name in names and name not in own:
            return r
    return None


def load_yaml(path: str, cls=None, saved: bool = False) -> dict:
    """Options from a YAML file, for ``cls`` (default: the class of the file's ``recipe``).

    An option of a section the recipe does not honour (``serl.config.sections``) is refused when
    its value differs from the recipe's default; a shared preset that only restates the
    default is no request. ``saved``: the run's own config.yaml (a resume), which holds
    every option, so nothing in it is refused."""
    from serl.config.sections import ignored, refusal

    p, data = read_yaml(path)
    if cls is None:
        from serl.config.registry import config_class

        cls = config_class(recipe_of(data.get("recipe"), f"{p}: option 'recipe'"))
    names = {f.name: f for f in dataclasses.fields(cls)}
    alias = {a: f.name for f in names.values() for a in aliases_of(f.name)}
    unused = {} if saved else ignored(cls)
    recipe = getattr(cls, "RECIPE", "serl")
    out: dict = {}
    for k, v in data.items():
        key = alias.get(k, k)
        if key not in names:
            owner = _owner_of(k, cls)
            if owner:
                raise ConfigError(f"{p}: option '{k}' belongs to recipe '{owner}', not to recipe '{recipe}'")
            raise ConfigError(f"{p}: unknown option '{k}'")
        if key == "use_wandb" and isinstance(v, str):  # a key in the YAML: never echoed back
            try:
                out[key] = wandb_flag(v)
            except argparse.ArgumentTypeError as e:
                raise ConfigError(f"{p}: option '{k}' {e}") from None
            continue
        out[key] = coerce(v, type_of(cls, names[key]), f"{p}: option '{k}'")
        if names[key].metadata.get("const") is not None:  # true/false/auto options (bf16): YAML's booleans too
            out[key] = yes_no(v)
            if out[key] not in names[key].metadata["choices"]:
                raise ConfigError(
                    f"{p}: option '{k}': expected one of {', '.join(names[key].metadata['choices'])}, got {v!r}"
                )
        if key in unused and out[key] != _default(names[key]):
            raise ConfigError(f"{p}: option '{k}' {refusal(recipe, unused[key])}")
    return out


def _default(f: dataclasses.Field):
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def recipe_of(value, where: str) -> str:
    from serl.config.registry import recipe_names

    name = "serl" if value in (None, "") else str(value)
    if name not in recipe_names():
        raise ConfigError(f"{where}: unknown recipe {name!r}; known: {', '.join(recipe_names())}")
    return name


def wandb_flag(value: str) -> bool:
    """``--use_wandb`` as OpenRLHF takes it: true/false, or the W&B API key itself. A key is
    handed to W&B through ``WANDB_API_KEY`` in this process and kept nowhere else: not in
    the config, a log, the run directory or an error message."""
    low = value.strip().lower()
    if low in ("true", "1", "yes", "on"):
        return True
    if low in ("false", "0", "no", "off"):
        return False
    if not re.fullmatch(r"[A-Za-z0-9_\-]{20,}", value.strip()):  # W&B keys: 40+ such characters
        raise argparse.ArgumentTypeError("expects true, false or a W&B API key (the value is not shown)")
    os.environ["WANDB_API_KEY"] = value.strip()
    return True


def dump(cfg, path: Path) -> None:
    """Write ``cfg`` as YAML, atomically: a crash leaves the old file or the new one, whole."""
    import yaml

    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself survives a power cut
    finally:
        os.close(fd)
