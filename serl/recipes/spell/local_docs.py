"""Build a SPELL training corpus from documentation already installed on this machine, with no
network: the docstrings of Python modules, read from their source files with ``ast`` (nothing
is imported or run, so a module's own code never executes).

    python -m serl.recipes.spell.local_docs OUT.jsonl                       # the standard library's DEFAULT_MODULES
    python -m serl.recipes.spell.local_docs OUT.jsonl --module json --module email --min_chars 300

One JSON object a line, as :mod:`serl.recipes.spell.docs` writes them: ``{"cluster", "doc", "title",
"text"}``. A row is one docstring (of a module, class or function) of at least ``--min_chars``
characters, its text led by the dotted name (``json.decoder.JSONDecoder: Simple JSON ...``);
the cluster is the module (a package: each of its source files), so a cluster's paragraphs are
about one piece of code. ``serl train --recipe spell --corpus OUT.jsonl`` reads it (clusters
longer than ``--cluster_size`` paragraphs are cut into runs). Files that are not UTF-8 or do
not parse are skipped and counted; an unknown module is an error (exit 2); the output file is
written whole or not at all.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import inspect
import json
import os
import sys
from pathlib import Path

# Pure-Python modules of the standard library with prose docstrings (on every CPython install).
DEFAULT_MODULES = (
    "argparse",
    "bisect",
    "calendar",
    "csv",
    "dataclasses",
    "difflib",
    "email",
    "fractions",
    "ftplib",
    "gettext",
    "heapq",
    "json",
    "logging",
    "pathlib",
    "shlex",
    "shutil",
    "statistics",
    "string",
    "tarfile",
    "textwrap",
    "urllib",
    "zipfile",
)


class SourceError(ValueError):
    """A module that cannot be found as Python source."""


def module_files(name: str) -> list[tuple[str, Path]]:
    """(dotted module name, source file) of ``name`` and, for a package, every module in it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as e:
        raise SourceError(f"module {name!r}: {e}") from None
    if spec is None:
        raise SourceError(f"module {name!r} is not installed")
    if spec.submodule_search_locations:
        out = []
        for root in spec.submodule_search_locations:
            for p in sorted(Path(root).rglob("*.py")):
                rel = p.relative_to(root).with_suffix("").parts
                if any(part.startswith("test") or part == "__main__" for part in rel):
                    continue
                out.append((".".join((name,) + (rel[:-1] if rel[-1] == "__init__" else rel)), p))
        return out
    if not spec.origin or not spec.origin.endswith(".py"):
        raise SourceError(f"module {name!r} has no Python source ({spec.origin}); choose another")
    return [(name, Path(spec.origin))]


def docstrings(module: str, source: str) -> list[tuple[str, str]]:
    """(dotted name, cleaned docstring) of the module and its classes and functions, in source order."""
    tree = ast.parse(source)
    out = []

    def visit(node, prefix: str) -> None:
        doc = ast.get_docstring(node, clean=True)
        if doc:
            out.append((prefix, doc))
        for child in getattr(node, "body", []):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, f"{prefix}.{child.name}")

    visit(tree, module)
    return out


def build(modules, min_chars: int = 200) -> tuple[list[dict], dict]:
    """The corpus rows of ``modules`` and what was skipped."""
    rows, stats = [], {"files": 0, "unreadable": 0, "short": 0}
    for name in modules:
        for module, path in module_files(name):
            try:
                found = docstrings(module, path.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, SyntaxError, ValueError, OSError):
                stats["unreadable"] += 1
                continue
            stats["files"] += 1
            for k, (title, doc) in enumerate(found):
                if len(doc) < min_chars:
                    stats["short"] += 1
                    continue
                rows.append(
                    {
                        "cluster": module,
                        "doc": f"{module}#{k}",
                        "title": title,
                        "text": f"{title}: {inspect.cleandoc(doc)}",
                    }
                )
    return rows, stats


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the JSONL file to write")
    ap.add_argument(
        "--module",
        action="append",
        default=None,
        help="a module or package to read (repeatable; default: a set of standard-library modules)",
    )
    ap.add_argument("--min_chars", type=int, default=200, help="shorter docstrings are left out")
    args = ap.parse_args(argv)
    if args.min_chars < 1:
        ap.error(f"--min_chars: must be >= 1, got {args.min_chars}")
    try:
        rows, stats = build(args.module or DEFAULT_MODULES, args.min_chars)
    except SourceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not rows:
        print(f"error: no docstring of {args.min_chars}+ characters found; nothing written", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    os.replace(tmp, out)  # whole or not at all
    print(
        f"{out}: {len(rows)} documents in {len({r['cluster'] for r in rows})} clusters from {stats['files']} files "
        f"({stats['short']} short docstrings left out, {stats['unreadable']} files unreadable)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
