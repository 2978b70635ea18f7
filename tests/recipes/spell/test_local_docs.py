"""A SPELL corpus from installed documentation (module docstrings read with ast, nothing imported)."""

import json

import pytest

from serl.recipes.spell.corpus import read_corpus
from serl.recipes.spell.local_docs import build, main

PKG = {
    "__init__.py": '"""Boats of the Korrin ferry line, described at length for the test corpus: the ferry Alda '
    'sails at seven and carries forty cars across the sound every morning of the year."""\n'
    'raise SystemExit("importing this package would stop the test")\n',
    "harbour.py": 'class Pier:\n    """Pier nine is the longest pier of Korrin harbour; it was rebuilt in 2011 '
    'after the storm and holds twelve moorings for the smaller boats of the line."""\n\n'
    '    def short(self):\n        """Too short."""\n',
    "broken.py": "def (:\n",
    "tests/test_x.py": '"""A test module with a long docstring that is left out of the corpus on purpose, '
    'because tests are not documentation and say little about the code."""\n',
}


@pytest.fixture
def pkg(tmp_path, monkeypatch):
    root = tmp_path / "src" / "korrin_docs"
    for rel, text in PKG.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    return root


def test_docstrings_without_importing(pkg):
    rows, stats = build(["korrin_docs"], min_chars=100)
    assert [(r["cluster"], r["title"]) for r in rows] == [
        ("korrin_docs", "korrin_docs"),
        ("korrin_docs.harbour", "korrin_docs.harbour.Pier"),
    ]
    assert rows[1]["text"].startswith("korrin_docs.harbour.Pier: Pier nine is the longest pier")
    assert stats == {"files": 2, "unreadable": 1, "short": 1}  # broken.py does not parse; "Too short." is left out


def test_command_writes_a_corpus_spell_reads(pkg, tmp_path, capsys):
    out = tmp_path / "corpus.jsonl"
    assert main([str(out), "--module", "korrin_docs", "--module", "json", "--min_chars", "100"]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert {"korrin_docs", "json", "json.decoder"} <= {r["cluster"] for r in rows}
    assert all(set(r) == {"cluster", "doc", "title", "text"} for r in rows)
    corpus = read_corpus(out, cluster_size=6)
    assert corpus.stats.documents == len(rows) and {c.id.split("#")[0] for c in corpus.clusters} >= {"json.decoder"}
    assert "documents in" in capsys.readouterr().out


def test_unknown_module_and_nothing_found_exit_2_writing_nothing(pkg, tmp_path, capsys):
    out = tmp_path / "c.jsonl"
    assert main([str(out), "--module", "no_such_module_xyz"]) == 2
    assert "module 'no_such_module_xyz' is not installed" in capsys.readouterr().err
    assert main([str(out), "--module", "korrin_docs", "--min_chars", "100000"]) == 2
    assert "nothing written" in capsys.readouterr().err and not out.exists()
