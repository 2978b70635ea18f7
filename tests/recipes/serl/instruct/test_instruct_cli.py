import json

import pytest

from serl.recipes.serl.instruct.cli import cli_main, write_jsonl_atomic


@pytest.mark.parametrize(
    "make_args,msg",
    [
        (lambda d: ["--seeds", str(d / "missing.jsonl")], "seed file not found"),
        (lambda d: ["--seeds", str(d / "bad.jsonl")], "bad.jsonl:2: not valid JSON"),
        (lambda d: ["--seeds", str(d / "good.jsonl"), "--input_key", "question"], "missing key 'question'"),
        (lambda d: ["--seeds", str(d / "good.jsonl"), "-n", "0"], "--num must be >= 1"),
        (lambda d: ["--seeds", str(d / "good.jsonl"), "--template", "nope"], "template not found"),
        (lambda d: ["--seeds", str(d / "good.jsonl"), "--min_words", "9", "--max_words", "3"], "min_words"),
        (lambda d: ["--seeds", str(d / "good.jsonl"), "--model", str(d / "nomodel")], "does not exist"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, make_args, msg):
    (tmp_path / "good.jsonl").write_text(json.dumps({"problem": "What is 2 + 2?"}) + "\n")
    (tmp_path / "bad.jsonl").write_text(json.dumps({"problem": "What is 2 + 2?"}) + "\n{oops\n")
    out = tmp_path / "out.jsonl"
    assert cli_main(make_args(tmp_path) + ["--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_write_jsonl_atomic_replaces_whole_file(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text("old\n")
    write_jsonl_atomic(p, [{"a": 1}, {"b": "é"}])
    assert p.read_text(encoding="utf-8") == '{"a": 1}\n{"b": "é"}\n'

    class Boom:
        def __iter__(self):
            yield {"c": 3}
            raise RuntimeError("crash mid-write")

    with pytest.raises(RuntimeError):
        write_jsonl_atomic(p, Boom())
    assert p.read_text(encoding="utf-8") == '{"a": 1}\n{"b": "é"}\n'  # untouched
    assert [q.name for q in tmp_path.iterdir()] == ["x.jsonl"]
