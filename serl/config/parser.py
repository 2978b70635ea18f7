"""The command line of ``serl train``: the parser for a recipe's config class (the common options of
the sections it honours, then its own, each with its one-line doc; other recipes' and unhonoured
sections' flags refused by name), and ``parse_args``: defaults < YAML (--config) < flags."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import sys

from serl.config.compat_flags import aliases_of, foreign_names
from serl.config.files import coerce, load_yaml, read_yaml, recipe_of, type_of, wandb_flag, yes_no
from serl.config.options import TrainConfig


class _Parser(argparse.ArgumentParser):
    recipe: str = "serl"  # the recipe whose options it parses
    refused: list[str] | None = None  # set: names refused are collected here, to be reported at once

    def error(self, message):  # exit 2 with one line naming the field (no usage dump: --help has it)
        if message.startswith("unrecognized arguments: "):
            message += self._unknown_hint(message.split(": ", 1)[1].split())
        self.exit(2, f"serl: error: {message}\n")

    def refuse(self, message: str) -> None:
        if self.refused is None:
            self.error(message)  # exits
        else:
            self.refused.append(message)

    def unknown(self, words: list[str]) -> list[str]:
        """One message per unknown flag (with its values), each saying why."""
        known = [o for o, a in self._option_string_actions.items() if a.help != argparse.SUPPRESS]
        out, k = [], 0
        while k < len(words):
            j = k + 1
            while j < len(words) and not words[j].startswith("--"):
                j += 1
            flag = words[k].split("=")[0]
            if flag.startswith("--"):
                near = difflib.get_close_matches(flag, known, n=1, cutoff=0.75)
                out.append(
                    f"{' '.join(words[k:j])}: not an option of {self.prog}"
                    + (f" (did you mean {near[0]}?)" if near else "")
                )
            else:
                out.append(f"{' '.join(words[k:j])}: unexpected word (serl reads --flag VALUE and key=value)")
            k = j
        return out

    def _unknown_hint(self, words: list[str]) -> str:
        """Why an unknown flag is refused, and the nearest serl option."""
        flags = [w.split("=")[0] for w in words if w.startswith("--")]
        known = [o for o, a in self._option_string_actions.items() if a.help != argparse.SUPPRESS]
        near = difflib.get_close_matches(flags[0], known, n=1, cutoff=0.75) if flags else []
        return (
            (f" (did you mean {near[0]}?)" if near else "")
            + f"; not an option of {self.prog}: `{self.prog} --help` lists serl's options, docs/compat.md the "
            f"names of SeRL/OpenRLHF, spiral-rl, verl and SPELL that serl maps, notes or refuses"
        )

    def report(self) -> None:
        """Exit 2 with every refusal collected, one line each."""
        if not self.refused:
            return
        where = (
            f"`{self.prog} --help` lists serl's options, docs/compat.md the names of SeRL/OpenRLHF, "
            f"spiral-rl, verl and SPELL that serl maps, notes or refuses"
        )
        if len(self.refused) == 1:  # an unknown name gets the pointers; a known one's message says it all
            more = f"; {where}" if ": not an option of" in self.refused[0] else ""
            self.exit(2, f"serl: error: {self.refused[0]}{more}\n")
        lines = "".join(f"  {m}\n" for m in self.refused)
        self.exit(2, f"serl: error: {len(self.refused)} options refused, all listed here ({where}):\n{lines}")


class _ForeignOption(argparse.Action):
    """A flag that belongs to another recipe: refused, naming its owner."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.refuse(
            f"{option_string} belongs to recipe '{self.default}', not to recipe "
            f"'{parser.recipe}' (add --recipe {self.default})"
        )


class _UnusedOption(argparse.Action):
    """A common flag of a section this recipe does not honour (serl.config.sections): refused."""

    def __call__(self, parser, namespace, values, option_string=None):
        from serl.config.sections import refusal

        parser.refuse(f"{option_string} {refusal(parser.recipe, self.default)}")


def build_parser(cls=None, prog: str = "serl train") -> _Parser:
    """The parser for ``cls`` (a recipe's config class; default: SeRL's): the common options
    of the sections the recipe honours, then the recipe's own, each with its one-line doc."""
    from serl.config.registry import config_class, recipe_names
    from serl.config.sections import SECTION_OF, SECTIONS, declared

    cls = cls or config_class("serl")
    recipe = getattr(cls, "RECIPE", "serl")
    ap = _Parser(
        prog=prog,
        description=(cls.__doc__ or TrainConfig.__doc__ or "").strip() or None,
        epilog="The names of SeRL/OpenRLHF, spiral-rl, verl's SPIN and SPELL are read too: each "
        "section lists those that map to its options; docs/compat.md has every mapping, "
        "note and refusal, with the reasons.",
    )
    ap.recipe = recipe
    ap.add_argument("--config", help="YAML file of options (flags given here override it)")
    ap.add_argument("--resume", default="", help="continue the run in this run directory")
    honoured = declared(cls)
    theirs = foreign_names(recipe)
    names_of: dict[str | None, tuple[str, ...]] = {s: SECTIONS[s][1] for s in honoured}
    names_of[None] = tuple(f.name for f in dataclasses.fields(cls) if SECTION_OF.get(f.name) is None)
    groups = {
        s: ap.add_argument_group(
            f"common options: {SECTIONS[s][0]}" if s else f"options of the '{recipe}' recipe",
            _mapped(names_of[s], theirs),
        )
        for s in (*honoured, None)
    }
    own = groups.pop(None)
    for f in dataclasses.fields(cls):
        sec = SECTION_OF.get(f.name)
        names = [f"--{f.name}"] + [f"--{a}" for a in aliases_of(f.name)]
        if sec is not None and sec not in honoured:
            for n in (*names, f"--no_{f.name}"):
                ap.add_argument(
                    n, action=_UnusedOption, nargs="*", default=sec, dest=f"_unused_{n[2:]}", help=argparse.SUPPRESS
                )
            continue
        _add(groups[sec] if sec else own, cls, f, names)
    for other in recipe_names():
        for f in dataclasses.fields(config_class(other)):
            for n in (f.name, *aliases_of(f.name), f"no_{f.name}"):
                if f"--{n}" not in ap._option_string_actions:
                    ap.add_argument(
                        f"--{n}",
                        action=_ForeignOption,
                        nargs="*",
                        default=other,
                        dest=f"_foreign_{n}",
                        help=argparse.SUPPRESS,
                    )
    return ap


def _mapped(names, theirs: dict[str, list[str]]) -> str | None:
    """A section's line of the other projects' names for its options (``serl train --help``)."""
    parts = [f"--{n} <- {', '.join(theirs[n])}" for n in names if n in theirs]
    return ("from other projects: " + "; ".join(parts)) if parts else None


def _add(g, cls, f: dataclasses.Field, names: list[str]) -> None:
    """One option's flags (and its ``--no_`` form for booleans) in argument group ``g``."""
    from serl.config.registry import recipe_names

    typ = type_of(cls, f)
    doc = f.metadata.get("help", "")
    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    if f.name == "recipe":
        g.add_argument(*names, dest=f.name, default=None, choices=recipe_names(), help=doc + f" (default {default!r})")
    elif f.name == "use_wandb":  # true/false, or OpenRLHF's --use_wandb KEY
        g.add_argument(
            *names,
            dest=f.name,
            nargs="?",
            const=True,
            default=None,
            type=wandb_flag,
            help=doc + f" (default {default})",
        )
        g.add_argument(f"--no_{f.name}", dest=f.name, action="store_false", help=argparse.SUPPRESS)
    elif f.metadata.get("const") is not None:  # a bare flag means const (--bf16: true); --no_NAME false
        g.add_argument(
            *names,
            dest=f.name,
            nargs="?",
            const=f.metadata["const"],
            default=None,
            choices=f.metadata.get("choices"),
            type=yes_no,
            help=doc + f" (default {default!r})",
        )
        g.add_argument(f"--no_{f.name}", dest=f.name, action="store_const", const="false", help=argparse.SUPPRESS)
    elif typ is bool:
        g.add_argument(
            *names,
            dest=f.name,
            nargs="?",
            const=True,
            default=None,
            type=lambda s, n=f.name: coerce(s, bool, f"--{n}"),
            help=doc + f" (default {default})",
        )
        g.add_argument(f"--no_{f.name}", dest=f.name, action="store_false", help=argparse.SUPPRESS)
    elif typ is list:
        g.add_argument(*names, dest=f.name, nargs="+", type=float, default=None, help=doc + f" (default {default})")
    else:
        g.add_argument(
            *names,
            dest=f.name,
            type=typ,
            default=None,
            choices=f.metadata.get("choices"),
            help=doc + f" (default {default!r})",
        )


def flag_value(argv: list[str], flag: str) -> str | None:
    """The value of ``--flag V`` or ``--flag=V`` in ``argv`` (None if absent)."""
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def recipe_from_args(argv: list[str]) -> str:
    """The recipe a command line asks for: ``--recipe``, else the YAML's ``recipe``, else serl."""
    name = flag_value(argv, "--recipe")
    if name is not None:
        return recipe_of(name, "--recipe")
    conf = flag_value(argv, "--config")
    if conf:
        p, data = read_yaml(conf)
        return recipe_of(data.get("recipe"), f"{p}: option 'recipe'")
    return "serl"


def parse_args(
    argv: list[str] | None = None, cls=None, saved: bool = False, refused: list[str] | None = None
) -> tuple[TrainConfig, argparse.Namespace]:
    """Defaults < YAML (--config) < command-line flags, for the recipe they name.

    Returns the recipe's config (common options plus its own). Raises ConfigError on
    bad values; unknown flags, other recipes' flags and flags of sections the recipe does
    not honour exit 2 (argparse), all of them in one message. ``saved``: --config is the run's own
    config.yaml (resume); ``refused``: what ``serl.config.compat.rewrite`` refused, reported with them.
    """
    from serl.config.registry import config_class

    argv = list(sys.argv[1:] if argv is None else argv)
    if cls is None:
        cls = config_class(recipe_from_args(argv))
    ap = build_parser(cls)
    ap.refused = list(refused or ())
    ns, unknown = ap.parse_known_args(argv)
    ap.refused += ap.unknown(unknown)
    ap.report()  # every refused name at once: a template's flags are cleared in one run, not one a run
    values = load_yaml(ns.config, cls, saved=saved) if ns.config else {}
    for f in dataclasses.fields(cls):
        v = getattr(ns, f.name, None)  # None: not given, or an option this recipe does not use
        if v is not None:
            values[f.name] = v
    values["recipe"] = getattr(cls, "RECIPE", "serl")
    cfg = cls(**values)
    cfg.validate()
    return cfg, ns


if __name__ == "__main__":  # pragma: no cover
    print(json.dumps(parse_args()[0].to_dict(), indent=1))
