"""Real few-shot generation with SmolLM2 (slow: loads the model, a few seconds of decoding)."""

import json
import random
from pathlib import Path

import pytest
import torch

from serl.data.seeds import read_seeds
from serl.recipes.serl.instruct import InstructConfig, PromptPool, SelfInstruct, parse_items
from serl.recipes.serl.instruct.cli import cli_main

# The shared data sits next to the repository: ROOT/../shared/data.
DATA = Path(__file__).resolve().parents[4].parent / "shared" / "data"
SEED_FILE = DATA / "serl_seed" / "0_2_0_8_train_with_idx_sample_500.jsonl"


def _short_seeds(n=24):
    try:
        seeds = read_seeds(SEED_FILE)
    except Exception as e:
        pytest.skip(f"seed data unavailable: {e}")
    return sorted(seeds, key=lambda p: len(p.text))[:n]  # short prompts keep the test quick


@pytest.fixture(scope="module")
def smol_generator(smol_path, smol_tokenizer):
    from serl.engines.hf_generator import HFGenerator

    # One thread: on a shared 2-core machine two threads were >7x slower (oversubscribed).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield HFGenerator(smol_path, smol_tokenizer, seed=0, dtype=torch.bfloat16)
    torch.set_num_threads(threads)


@pytest.mark.slow
@pytest.mark.parametrize("chat_format", [False, True])
def test_smollm2_fewshot_generation_parses(tmp_path, smol_generator, smol_tokenizer, chat_format):
    pool = PromptPool.create(tmp_path, _short_seeds())
    cfg = InstructConfig(n_shots=4, prompts_per_call=3, max_new_tokens=48, max_attempts=1, chat_format=chat_format)
    si = SelfInstruct(smol_generator, smol_tokenizer, pool, cfg)
    items, m = si.propose(50, step=1, rng=random.Random(0))
    assert m["instruct/completions"] == 3 and m["instruct/attempts"] == 1
    assert m["instruct/candidates"] >= 1  # the model's list continuation parses into items
    assert all(c.text and "\n" not in c.text for c in si.last_candidates)
    assert len(items) == m["instruct/accepted"] == pool.stats()["pool/pending"]
    known = set(pool.known_texts()[:24])
    assert not any(it.text in known for it in items)


@pytest.mark.slow
def test_cli_writes_candidates_atomically(tmp_path, smol_generator):
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text("".join(json.dumps({"problem": p.text, "answer": p.label}) + "\n" for p in _short_seeds()))
    out = tmp_path / "out" / "gen.jsonl"
    rc = cli_main(
        [
            "--seeds",
            str(seeds),
            "--out",
            str(out),
            "-n",
            "2",
            "--n_shots",
            "4",
            "--prompts_per_call",
            "2",
            "--max_new_tokens",
            "32",
            "--max_attempts",
            "1",
        ]
    )
    assert rc == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows and all({"text", "passed", "filter", "reason", "parents"} <= set(r) for r in rows)
    assert all(r["passed"] == (r["filter"] is None) for r in rows)
    assert [p.name for p in out.parent.iterdir()] == ["gen.jsonl"]  # no temp file left


def test_parse_items_on_a_recorded_smollm2_completion():
    # Shaped like a raw-format SmolLM2 completion: items taken from a development run,
    # cut by the length limit in the middle of item 11.
    text = (
        " Find the smallest positive integer $k$ such that $10^k \\equiv 1 \\bmod 11$.\n"
        "10. Find the equation of a circle centered at the origin with radius $7$.\n"
        "11. A snail is at the bottom of a 20-foot well. Each day, it climbs 3 feet, but at"
    )
    assert parse_items(text, 9, finished_by_length=True) == [
        "Find the smallest positive integer $k$ such that $10^k \\equiv 1 \\bmod 11$.",
        "Find the equation of a circle centered at the origin with radius $7$.",
    ]
