"""A 5 MB line of input is refused (or skipped and counted) before any work, in every recipe
and in `serl instruct` / `serl eval`: exit 2, the file and line named, within seconds, no
run directory; the line is never tokenized (serl.data.lengths' character bound).

In-process (the tokenizer of the embedded SmolLM2 only; no model is loaded), so fast."""

import json
import logging
import re
import time

import pytest

from serl.data.lengths import PromptBudget, fit_rows, max_token_chars

BIG = 5_000_000  # characters: the 5 MB seed line


def _big_text() -> str:
    return "What is 1 + 1? " * (BIG // 15)


def _train(capsys, tmp_path, *args):
    from serl.cli.train import main

    run_dir = tmp_path / "run"
    t0 = time.perf_counter()
    code = main(["--run_dir", str(run_dir), "--generator", "hf", "--progress", "quiet", *map(str, args)])
    return code, capsys.readouterr().err, time.perf_counter() - t0, run_dir


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def never_tokenize_big(monkeypatch, smol_tokenizer):
    """Fails the test if anything tokenizes a text of 1 MB or more with the SmolLM2 tokenizer."""
    cls = type(smol_tokenizer)
    real = cls.__call__

    def guarded(self, text=None, *args, **kw):
        assert not isinstance(text, str) or len(text) < 1_000_000, "a huge text was tokenized"
        return real(self, text, *args, **kw)

    monkeypatch.setattr(cls, "__call__", guarded)


@pytest.mark.parametrize(
    "recipe,flags",
    [
        ("serl", ["--prompt_data", "{big}"]),
        ("serl", ["--prompt_data", "{good}", "--eval_data", "{big}"]),  # a held-out problem: never skipped
        ("spin", ["--prompt_data", "{big}"]),
        ("spin", ["--prompt_data", "{big_answer}"]),  # the human answer is the long text
        ("spin", ["--prompt_data", "{big}", "--spin_mode", "online", "--output_key", ""]),
        ("spell", ["--corpus", "{big_doc}", "--heldout_eval", "false"]),
    ],
)
def test_a_5mb_line_is_refused_with_file_and_line(tmp_path, capsys, smol_path, never_tokenize_big, recipe, flags):
    files = {
        "big": _jsonl(
            tmp_path / "big.jsonl",
            [
                {"problem": "What is 2 + 2?", "answer": "4", "solution": "4"},
                {"problem": _big_text(), "answer": "2", "solution": "2"},
            ],
        ),
        "good": _jsonl(tmp_path / "good.jsonl", [{"problem": "What is 2 + 2?", "answer": "4"}]),
        "big_answer": _jsonl(
            tmp_path / "big_answer.jsonl", [{"problem": "What is 2 + 2?", "answer": "4", "solution": _big_text()}]
        ),
        "big_doc": _jsonl(tmp_path / "big_doc.jsonl", [{"text": _big_text(), "cluster": "a"}]),
    }
    if "{big}" in flags and "--eval_data" not in flags:  # the file's only problem is the long one
        _jsonl(files["big"], [{"problem": _big_text(), "answer": "2", "solution": "2"}])
    args = [f.format(**{k: str(v) for k, v in files.items()}) for f in flags]
    code, err, secs, run_dir = _train(capsys, tmp_path, "--recipe", recipe, "--model", smol_path, *args)
    where = {
        "{big}": "big.jsonl:2" if "--eval_data" in flags else "big.jsonl:1",
        "{big_answer}": "big_answer.jsonl:1",
        "{big_doc}": "big_doc.jsonl:1",
    }
    needle = next(v for k, v in where.items() if k in flags)
    assert code == 2, err
    assert needle in err and "Traceback" not in err, err
    assert re.search(r"49999\d\d characters", err)  # judged by its length alone (never tokenized)
    assert secs < 20, secs
    assert not run_dir.exists()


def test_spiral_refuses_a_5mb_system_prompt(tmp_path, capsys, smol_path, never_tokenize_big):
    """SPIRAL reads no data file; its untrusted text is the instruction put into every prompt."""
    code, err, secs, run_dir = _train(
        capsys, tmp_path, "--recipe", "spiral", "--model", smol_path, "--system_prompt", _big_text()
    )
    assert code == 2 and "system_prompt:" in err and "characters, surely over" in err, err
    assert secs < 20 and not run_dir.exists()


def test_a_long_seed_among_good_ones_is_skipped_counted_and_named(tmp_path, smol_path, caplog):
    from serl.config.parser import parse_args
    from serl.recipes.serl.recipe import SerlRecipe

    seeds = _jsonl(
        tmp_path / "seeds.jsonl",
        [
            {"problem": "What is 2 + 2?", "answer": "4"},
            {"problem": _big_text(), "answer": "2"},
            {"problem": "What is 3 + 3?", "answer": "6"},
        ],
    )
    cfg, _ = parse_args(["--recipe", "serl", "--model", smol_path, "--prompt_data", str(seeds)])
    with caplog.at_level(logging.WARNING):
        kept = SerlRecipe.prepare(cfg)
    assert [p.text for p in kept] == ["What is 2 + 2?", "What is 3 + 3?"]
    assert [w for w, _ in kept.skipped] == [f"{seeds}:2"]
    assert f"1 of 3 problems skipped as too long: {seeds}:2" in caplog.text


def test_instruct_and_eval_refuse_a_5mb_line(tmp_path, capsys, smol_path, never_tokenize_big):
    from serl.eval.cli import cli_main as eval_main
    from serl.recipes.serl.instruct.cli import cli_main as instruct_main

    seeds = _jsonl(tmp_path / "seeds.jsonl", [{"problem": _big_text(), "answer": "2"}])
    t0 = time.perf_counter()
    code = instruct_main(["--seeds", str(seeds), "--out", str(tmp_path / "out.jsonl"), "--model", smol_path])
    err = capsys.readouterr().err
    assert code == 2 and f"{seeds}:1: prompt of" in err, err
    assert not (tmp_path / "out.jsonl").exists()

    (tmp_path / "data" / "toy").mkdir(parents=True)
    _jsonl(
        tmp_path / "data" / "toy" / "test.jsonl",
        [{"question": "What is 2 + 2?", "answer": "4"}, {"question": _big_text(), "answer": "2"}],
    )
    code = eval_main(
        [
            "--benchmarks",
            "toy",
            "--data_dir",
            str(tmp_path / "data"),
            "--model",
            smol_path,
            "--output_dir",
            str(tmp_path / "eval"),
            "--generator",
            "hf",
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "toy/test.jsonl:2: prompt of" in err, err
    assert time.perf_counter() - t0 < 40 and not (tmp_path / "eval").exists()


# ---- the rule itself, on a stand-in tokenizer: one token per character --------------------------
class CharTok:
    def get_vocab(self):
        return {"a": 0, "bb": 1}

    def __call__(self, text, add_special_tokens=False, split_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}


@pytest.mark.parametrize("chars,tokens", [(10, 10), (11, None), (2 * 64 * 10, None), (2 * 64 * 10 + 1, None)])
def test_budget_counts_or_says_surely_over(chars, tokens):
    """Limit 10 tokens: the character bound is 2 x 64 (the floor of the longest token) x 10 = 1280
    characters; up to it the text is tokenized, beyond it not."""
    b = PromptBudget(CharTok(), 10)
    assert max_token_chars(CharTok()) == 64 and b.max_chars == 1280
    n = b.measure("x" * chars)
    assert (n if n is None or n <= 10 else None) == tokens
    assert b.over(n) == (chars > 10)
    assert (n is None) == (chars > 1280)


def test_fit_rows_names_each_skip_and_refuses_when_none_is_left():
    from serl import DataError
    from serl.data.seeds import Problem

    rows = [Problem("short", where="f.jsonl:1"), Problem("x" * 50, where="f.jsonl:2"), Problem("ok", where="f.jsonl:3")]
    kept = fit_rows(rows, PromptBudget(CharTok(), 10), None, "f.jsonl")
    assert [p.text for p in kept] == ["short", "ok"]
    assert kept.skipped == [("f.jsonl:2", "prompt of 50 tokens; --prompt_max_len is 10")]
    with pytest.raises(DataError, match="f.jsonl:2: prompt of 50 tokens"):
        fit_rows(rows[1:2], PromptBudget(CharTok(), 10), None, "f.jsonl")
