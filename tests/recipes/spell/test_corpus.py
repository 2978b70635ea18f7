import json
import random
from pathlib import Path

import pytest

from serl.recipes.spell.corpus import CorpusError, read_corpus, sample_evidence, split_paragraphs

ROOT = Path(__file__).resolve().parents[3]
MAN = """NAME

ls - list
  directory   contents


SYNOPSIS

ls [OPTION]... [FILE]...
"""


def test_split_paragraphs_joins_headings_and_collapses_spaces():
    assert split_paragraphs(MAN) == ["NAME\nls - list\ndirectory contents", "SYNOPSIS\nls [OPTION]... [FILE]..."]
    assert split_paragraphs("tiny") == ["tiny"]
    assert split_paragraphs("A long enough first paragraph.\n\nend") == ["A long enough first paragraph.\nend"]
    assert split_paragraphs("\n \n\t\n") == []
    assert split_paragraphs("one\r\n\r\ntwo", min_chars=1) == ["one", "two"]


def make_folder(tmp_path):
    d = tmp_path / "docs"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_text("First paragraph of file a, long enough.\n\nSecond paragraph of file a, long enough.\n")
    (d / "sub" / "b.md").write_text("# Heading\n\nBody of b that is long enough to stand.\n")
    (d / "ls.1").write_text("not read: suffix .1 is not a text suffix")
    (d / "LS").write_text(MAN)  # a rendered man page without suffix
    (d / ".hidden.txt").write_text("never read, hidden file, long enough text")
    (d / "bin.txt").write_bytes(b"\xff\xfe\x00binary")
    (d / "index.json").write_text('{\n  "plain": "JSON, not JSONL: ignored in a folder"\n}\n')
    return d


def test_folder_reads_text_files_in_sorted_order(tmp_path):
    c = read_corpus(make_folder(tmp_path), cluster_size=2)
    paras = [p for cl in c.clusters for p in cl.paragraphs]
    assert paras == [
        "NAME\nls - list\ndirectory contents",
        "SYNOPSIS\nls [OPTION]... [FILE]...",
        "First paragraph of file a, long enough.",
        "Second paragraph of file a, long enough.",
        "# Heading\nBody of b that is long enough to stand.",
    ]
    assert [len(cl.paragraphs) for cl in c.clusters] == [2, 2, 1]
    assert [cl.id for cl in c.clusters] == ["chunk#0", "chunk#1", "chunk#2"]
    assert c.clusters[1].sources[0].endswith("a.txt")
    assert c.stats.as_dict() == {
        "files": 3,
        "documents": 3,
        "paragraphs": 5,
        "skipped_long": 0,
        "skipped_unreadable": 1,
    }
    assert c.stats.unreadable_files[0].endswith("bin.txt")


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_groups_by_cluster_key_and_chunks_the_rest(tmp_path):
    rows = [{"text": f"Document number {i} in group g, long enough.", "cluster": "g"} for i in range(3)]
    rows += [
        {"text": "Loose document one is long enough.\n\nIts second paragraph, long enough."},
        {"text": "Document in group h, long enough to count.", "cluster": 7},
    ]
    c = read_corpus(write_jsonl(tmp_path / "c.jsonl", rows), cluster_size=2)
    assert [(cl.id, len(cl.paragraphs)) for cl in c.clusters] == [("g#0", 2), ("g#1", 1), ("7", 1), ("chunk#0", 2)]
    assert c.clusters[0].sources == [f"{tmp_path / 'c.jsonl'}:1", f"{tmp_path / 'c.jsonl'}:2"]
    c = read_corpus(tmp_path / "c.jsonl", cluster_size=2, cluster_key=None)
    assert [cl.id for cl in c.clusters] == ["chunk#0", "chunk#1", "chunk#2"]


def test_a_json_file_given_directly_is_read_as_jsonl(tmp_path):
    p = write_jsonl(tmp_path / "c.json", [{"text": "A document that is long enough."}])
    assert read_corpus(p).clusters[0].paragraphs == ["A document that is long enough."]


def test_cluster_ids_stay_unique(tmp_path):
    rows = [{"text": f"Paragraph {i} of group g is long enough.", "cluster": "g"} for i in range(2)]
    rows += [{"text": "A group whose name clashes, long enough.", "cluster": "g#0"}]
    c = read_corpus(write_jsonl(tmp_path / "c.jsonl", rows), cluster_size=1)
    assert [cl.id for cl in c.clusters] == ["g#0", "g#1", "g#0+"]


def test_custom_text_key(tmp_path):
    p = write_jsonl(tmp_path / "c.jsonl", [{"body": "A body text that is long enough."}])
    assert read_corpus(p, text_key="body").clusters[0].paragraphs == ["A body text that is long enough."]


def test_too_long_paragraphs_are_skipped_and_counted(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("short enough paragraph here\n\n" + "word " * 50 + "\n\nanother short paragraph here")
    c = read_corpus(p, max_tokens=10, count_tokens=lambda s: len(s.split()))
    assert c.stats.skipped_long == 1 and c.stats.paragraphs == 2
    c = read_corpus(p, max_chars=40)
    assert c.stats.skipped_long == 1
    with pytest.raises(CorpusError, match=r"3 paragraph\(s\) skipped as longer than the budget"):
        read_corpus(p, max_tokens=2, count_tokens=lambda s: len(s.split()))


@pytest.mark.parametrize(
    "content,needle",
    [
        ('{"text": "ok text, long enough"}\n{not json}\n', ":2: not valid JSON"),
        ('{"text": "ok text, long enough"}\n{"body": "x"}\n', ":2: missing key 'text'"),
        ('{"text": 5}\n', ":1: key 'text' must be a string"),
        ("[1, 2]\n", ":1: expected a JSON object"),
        ('{"text": "some text, long enough", "cluster": [1]}\n', ":1: key 'cluster' must be a string or integer"),
        ("\n\n", "empty corpus"),
        ('{"text": "   "}\n', "empty corpus"),
    ],
)
def test_bad_jsonl_names_file_line_and_key(tmp_path, content, needle):
    p = tmp_path / "bad.jsonl"
    p.write_text(content)
    with pytest.raises(CorpusError) as e:
        read_corpus(p)
    assert str(p) in str(e.value) and needle in str(e.value)


def test_missing_empty_and_unreadable_paths(tmp_path):
    with pytest.raises(CorpusError, match="corpus not found: .*nope"):
        read_corpus(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError, match=r"empty.*: empty corpus.*looked at 0 file"):
        read_corpus(tmp_path / "empty")
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe")
    with pytest.raises(CorpusError, match="bin.txt:1: not UTF-8"):
        read_corpus(tmp_path / "bin.txt")
    with pytest.raises(CorpusError, match="count_tokens"):
        read_corpus(tmp_path / "bin.txt", max_tokens=5)
    with pytest.raises(CorpusError, match="cluster_size"):
        read_corpus(tmp_path / "bin.txt", cluster_size=0)


def test_shipped_corpus_reads_as_its_clusters():
    c = read_corpus(ROOT / "dataset" / "docs_train.jsonl")
    assert len(c.clusters) == 48 and {len(cl.paragraphs) for cl in c.clusters} == {6}
    assert c.clusters[0].id == "train-000"
    h = read_corpus(ROOT / "dataset" / "docs_heldout.jsonl")
    assert len(h.clusters) == 20 and not {cl.id for cl in c.clusters} & {cl.id for cl in h.clusters}


@pytest.mark.parametrize(
    "n,k,keep,expected_len,must",
    [
        (6, 2, (), 2, set()),
        (6, 2, (1, 4), 4, {1, 4}),
        (6, 10, (0,), 6, {0}),
        (3, 1, (7, -1, 2), 2, {2}),  # out-of-range history indices are ignored
    ],
)
def test_sample_evidence(n, k, keep, expected_len, must):
    got = sample_evidence(n, k, random.Random(0), keep)
    assert len(got) == expected_len and must <= set(got) and got == sorted(set(got))
    assert sample_evidence(n, k, random.Random(0), keep) == got  # seeded


@pytest.mark.parametrize(
    "sizes,budget,parts",
    [
        ([3, 3, 3], 9, [[0, 1, 2]]),  # fits: unchanged, same id
        ([3, 3, 3], 6, [[0, 1], [2]]),
        ([5, 1, 5, 1], 6, [[0, 1], [2, 3]]),
        ([2, 2, 2, 2], 2, [[0], [1], [2], [3]]),
    ],
)
def test_fit_clusters_splits_in_order(sizes, budget, parts):
    from serl.recipes.spell.corpus import Cluster, fit_clusters

    paras = [f"p{i} " + "w " * (n - 1) for i, n in enumerate(sizes)]
    c = Cluster("x", paras, [f"src{i}" for i in range(len(paras))])
    got = fit_clusters([c], lambda t: len(t.split()), budget)
    assert [[paras.index(p) for p in g.paragraphs] for g in got] == parts
    assert [g.id for g in got] == (["x"] if len(parts) == 1 else [f"x/{k}" for k in range(len(parts))])


def test_fit_clusters_refuses_a_paragraph_over_budget():
    from serl.recipes.spell.corpus import Cluster, CorpusError, fit_clusters

    with pytest.raises(CorpusError, match="src1: a paragraph of 5 tokens exceeds the budget of 4"):
        fit_clusters([Cluster("x", ["a b", "a b c d e"], ["src0", "src1"])], lambda t: len(t.split()), 4)


def test_parquet_corpus_reads_its_text_and_cluster_columns(tmp_path):
    """A Parquet file reads as the same rows in JSONL do: same clusters, row numbers in errors."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {"text": "First document, long enough to keep.", "cluster": "a", "extra": 1},
        {"text": "Second document, long enough as well.", "cluster": "a", "extra": 2},
        {"text": "A third one, in another cluster here.", "cluster": None, "extra": 3},
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "docs.parquet")
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got, want = read_corpus(tmp_path / "docs.parquet"), read_corpus(tmp_path / "docs.jsonl")
    assert [(c.id, c.paragraphs) for c in got.clusters] == [(c.id, c.paragraphs) for c in want.clusters]
    assert [c.id for c in got.clusters] == ["a", "chunk#0"]
    assert got.clusters[0].sources == [f"{tmp_path / 'docs.parquet'}: row 0", f"{tmp_path / 'docs.parquet'}: row 1"]
    assert got.stats.documents == 3

    pq.write_table(pa.Table.from_pylist([{"body": "x"}]), tmp_path / "nokey.parquet")
    with pytest.raises(CorpusError, match=r"nokey.parquet: no column 'text' \(columns: body\)"):
        read_corpus(tmp_path / "nokey.parquet")
    pq.write_table(pa.Table.from_pylist([{"text": "ok, long enough text"}, {"text": None}]), tmp_path / "null.parquet")
    with pytest.raises(CorpusError, match="null.parquet: row 1: key 'text' must be a string, got NoneType"):
        read_corpus(tmp_path / "null.parquet")
    (tmp_path / "fake.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(CorpusError, match="fake.parquet: not a readable Parquet file"):
        read_corpus(tmp_path / "fake.parquet")


def test_folder_with_parquet_skips_an_unreadable_one(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "c").mkdir()
    pq.write_table(pa.Table.from_pylist([{"text": "Text of a document in a folder."}]), tmp_path / "c" / "a.parquet")
    (tmp_path / "c" / "b.parquet").write_bytes(b"broken")
    c = read_corpus(tmp_path / "c")
    assert [c.paragraphs for c in c.clusters] == [["Text of a document in a folder."]]
    assert (c.stats.files, c.stats.skipped_unreadable) == (1, 1)


def test_spell_parquet_layout(tmp_path):
    """SPELL's own train.parquet: one cluster a row, documents as a list in 'paragraphs', with
    question_id and data_source columns; layout errors name the file, row and field."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [
        {
            "question_id": "q1",
            "data_source": "docmath_qa",
            "paragraphs": ["First report, revenue 12 million.", "Second report, costs 5 million."],
        },
        {"question_id": "q2", "data_source": "docmath_qa", "paragraphs": ["A lone document about the harbour."]},
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    c = read_corpus(tmp_path / "train.parquet", text_key="paragraphs", cluster_key="question_id")
    assert [(x.id, len(x.paragraphs)) for x in c.clusters] == [("q1", 2), ("q2", 1)] and c.stats.documents == 3
    by_row = read_corpus(tmp_path / "train.parquet", text_key="paragraphs", cluster_key=None)
    assert [len(x.paragraphs) for x in by_row.clusters] == [2, 1]  # no cluster key: a row is a cluster
    with pytest.raises(CorpusError, match=r"train.parquet: no column 'text' .*--corpus_text_key paragraphs"):
        read_corpus(tmp_path / "train.parquet")
    pq.write_table(
        pa.Table.from_pylist([{"question_id": "q", "paragraphs": ["fine text here", None]}]), tmp_path / "bad.parquet"
    )
    with pytest.raises(
        CorpusError, match=r"bad.parquet: row 0: key 'paragraphs' item 1 must be a string, got NoneType"
    ):
        read_corpus(tmp_path / "bad.parquet", text_key="paragraphs", cluster_key="question_id")
    pq.write_table(
        pa.Table.from_pylist([{"question_id": 1.5, "paragraphs": ["fine text here"]}]), tmp_path / "badid.parquet"
    )
    with pytest.raises(
        CorpusError, match=r"badid.parquet: row 0: key 'question_id' must be a string or integer, got float"
    ):
        read_corpus(tmp_path / "badid.parquet", text_key="paragraphs", cluster_key="question_id")
