"""The import graph of serl/: no loop between modules (at module level or inside a
function), and nothing under serl/engines/ imports the recipes."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "serl"


def _module_file(name: str) -> Path | None:
    rel = Path(*name.split("."))
    for p in (PKG.parent / rel.with_suffix(".py"), PKG.parent / rel / "__init__.py"):
        if p.is_file():
            return p
    return None


def _imports(path: Path) -> set[Path]:
    """The serl files ``path`` imports, wherever the import statement stands."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names if _module_file(f"{node.module}.{a.name}")]
            names = names or [node.module]
        for n in names:
            if n.split(".")[0] == "serl" and (f := _module_file(n)) is not None and f != path:
                out.add(f)
    return out


def graph() -> dict[Path, set[Path]]:
    return {p: _imports(p) for p in PKG.rglob("*.py")}


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
