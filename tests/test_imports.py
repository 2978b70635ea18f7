"""The import graph of serl/: the packages stand in layers and import only downward (at module
level or inside a function), no loop between modules, and nothing under serl/engines/ imports the
recipes."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "serl"

# serl's packages from the ground up (README, "Architecture"): each imports its own modules and those
# of the layers below it, never one of its own layer or above. "serl" is serl/__init__.py (the
# user's-input errors). The registry loads a recipe by name (importlib), which is no import here.
LAYERS: list[set[str]] = [
    {"serl", "algos", "shipped"},
    {"models"},
    {"engines", "data"},
    {"config"},
    {"rewards"},
    {"eval"},
    {"report"},
    {"run"},
    {"distributed", "recipes"},
    {"cli"},
]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}


def _dotted(path: Path, root: Path) -> list[str]:
    """serl/engines/stop.py -> ["serl", "engines", "stop"]; a package's __init__.py -> the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _statements(path: Path, root: Path):
    """(line, module, names) of each import statement in ``path``, wherever it stands (module level, a
    function, a TYPE_CHECKING block); relative imports resolved. ``names``: what ``from M import`` takes."""
    package = _dotted(path, root) if path.name == "__init__.py" else _dotted(path, root)[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name, []
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            yield node.lineno, module, [a.name for a in node.names]


def _module_file(name: str, root: Path = ROOT) -> Path | None:
    rel = Path(*name.split("."))
    for p in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
        if p.is_file():
            return p
    return None


def _imports(path: Path) -> set[Path]:
    """The serl files ``path`` imports, wherever the import statement stands."""
    out = set()
    for _, module, names in _statements(path, ROOT):
        found = [f for n in names if (f := _module_file(f"{module}.{n}")) is not None]
        for f in found or [_module_file(module)]:
            if module.split(".")[0] == "serl" and f is not None and f != path:
                out.add(f)
    return out


def graph() -> dict[Path, set[Path]]:
    return {p: _imports(p) for p in PKG.rglob("*.py")}


def _part(dotted: list[str]) -> str:
    """The package of serl that a module belongs to: serl.engines.stop -> engines; serl -> serl."""
    return dotted[1] if len(dotted) > 1 else "serl"


def upward_imports(root: Path = ROOT) -> list[str]:
    """Every import under ``root``/serl/ that runs up (or sideways) the layers, as
    ``file:line: package (layer i) imports module (package, layer j)``; a package of serl that
    LAYERS does not place is named too."""
    out = []
    for path in sorted((root / "serl").rglob("*.py")):
        rel = path.relative_to(root)
        me = _part(_dotted(path, root))
        if me not in LAYER:
            out.append(f"{rel}: package {me!r} has no place in LAYERS")
            continue
        for line, module, names in _statements(path, root):
            dotted = module.split(".")
            if dotted[0] != "serl":
                continue
            if len(dotted) == 1:  # from serl import X: a package of serl, or a name of serl/__init__.py
                targets = {n if _module_file(f"serl.{n}", root) else "serl" for n in names} or {"serl"}
            else:
                targets = {dotted[1]}
            for them in sorted(targets - {me}):
                if them not in LAYER:
                    out.append(f"{rel}:{line}: imports {module} (package {them!r}, which has no place in LAYERS)")
                elif LAYER[them] >= LAYER[me]:
                    out.append(f"{rel}:{line}: {me} (layer {LAYER[me]}) imports {module} ({them}, layer {LAYER[them]})")
    return out


def loops(g: dict[Path, set[Path]]) -> list[list[Path]]:
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_the_checker_sees_a_loop():
    a, b, c = Path("a.py"), Path("b.py"), Path("c.py")
    assert loops({a: {b}, b: {a}, c: {a}}) == [[a, b]]
    assert loops({a: {b}, b: {c}, c: set()}) == []


def test_no_import_loop():
    found = [[str(p.relative_to(PKG.parent)) for p in comp] for comp in loops(graph())]
    assert found == []


def test_the_layer_check_sees_an_import_that_runs_up(tmp_path):
    files = {
        "serl/__init__.py": "class ConfigError(ValueError): ...\n",
        "serl/engines/__init__.py": "",
        "serl/engines/stop.py": "import signal\n",
        "serl/engines/a.py": (
            "from serl import ConfigError\n"  # down: serl/__init__.py
            "from serl.engines import stop\n"  # its own package
            "from serl.run import loop\n"  # up, at module level
            "\n"
            "def f():\n"
            "    import serl.report.progress\n"  # up, inside a function
            "    from ..config import options\n"  # up, relative
            "    from serl import run\n"  # up: a package named through serl
        ),
        "serl/data/seeds.py": "from serl.engines.stop import signal\n",  # sideways: a peer of the same layer
        "serl/run/__init__.py": "",
        "serl/run/loop.py": "from serl.engines import a\nfrom . import lock\n",  # down; its own package
        "serl/run/lock.py": "",
        "serl/cache/x.py": "",  # a package with no layer
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert upward_imports(tmp_path) == [
        "serl/cache/x.py: package 'cache' has no place in LAYERS",
        "serl/data/seeds.py:1: data (layer 2) imports serl.engines.stop (engines, layer 2)",
        "serl/engines/a.py:3: engines (layer 2) imports serl.run (run, layer 7)",
        "serl/engines/a.py:6: engines (layer 2) imports serl.report.progress (report, layer 6)",
        "serl/engines/a.py:7: engines (layer 2) imports serl.config (config, layer 3)",
        "serl/engines/a.py:8: engines (layer 2) imports serl (run, layer 7)",
    ]


def test_no_import_runs_up_the_layers():
    assert upward_imports() == []


def test_the_layers_name_each_package_once():
    here = {_part(_dotted(p, ROOT)) for p in PKG.rglob("*.py")}
    assert sum(len(names) for names in LAYERS) == len(LAYER)
    assert set(LAYER) == here


def test_engines_do_not_import_the_recipes():
    g = graph()
    up = {
        str(p.relative_to(PKG.parent)): sorted(
            str(q.relative_to(PKG.parent)) for q in deps if (PKG / "recipes") in q.parents
        )
        for p, deps in g.items()
        if (PKG / "engines") in p.parents
    }
    assert {k: v for k, v in up.items() if v} == {}
