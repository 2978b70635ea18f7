"""Real `serl train --recipe spell` runs on SmolLM2 (transformers generator, tiny sizes): the
shipped corpus with held-out evaluation and an exact resume (one run of two steps, one of one
step plus a resumed step); a user's text folder read as the run reads it; a verifier warm-up
resumed in its middle. The runs go two at a time (one module fixture, one thread each)."""

import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TINY = [
    "--generator",
    "hf",
    "--rollout_batch_size",
    "2",
    "--n_samples_per_prompt",
    "2",
    "--verifier_samples",
    "2",
    "--grounding_samples",
    "1",
    "--max_refill_rounds",
    "1",
    "--cluster_size",
    "2",
    "--paragraphs_per_prompt",
    "1",
    "--questioner_max_len",
    "32",
    "--generate_max_len",
    "32",
    "--verifier_max_len",
    "16",
    "--prompt_max_len",
    "512",
    "--actor_learning_rate",
    "1e-5",
    "--progress",
    "quiet",
    "--save_model",
    "false",
]
EVAL = [
    "--eval_qa_limit",
    "2",
    "--eval_verify_limit",
    "2",
    "--eval_questioner_limit",
    "1",
    "--eval_docs",
    ROOT / "dataset/docs_heldout.jsonl",
    "--eval_qa_data",
    ROOT / "dataset/docs_heldout_qa.jsonl",
    "--eval_verify_data",
    ROOT / "dataset/docs_heldout_verify.jsonl",
]
SHIPPED = ["--corpus", ROOT / "dataset/docs_train.jsonl", *EVAL]
NO_PLOTS = ["--report", "false"]  # only "two" is checked for its report; the plots take seconds a run
WARM = [
    "--verifier_warmup_steps",
    2,
    "--verifier_warmup_pairs",
    2,
    "--verifier_warmup_samples",
    4,
    "--heldout_eval",
    "false",
    "--corpus",
    ROOT / "dataset/docs_train.jsonl",
    "--verifier_warmup_data",
    ROOT / "dataset/docs_train_verify.jsonl",
]


def rows(run_dir: Path) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        out.setdefault(rec["step"], {}).update(
            {k: v for k, v in rec.items() if not k.startswith("time/") and k not in ("wall_time", "time")}
        )
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory, serl_start, cut_back):
    """Every real run of the module, never more than two at once (conftest's serl_start: one
    intra-op thread each, as these runs always had): "two", the shipped corpus for two steps with
    held-out evaluation; "one", its first step without evaluation, then "one+1", that run resumed
    for a second step; "whole", three steps with a two-step verifier warm-up, then "part", its copy
    cut back to its step-1 checkpoint (conftest's cut_back), resumed. Name -> (CompletedProcess or
    None when the run it continues failed, run dir); the tests check the exit codes."""
    root = tmp_path_factory.mktemp("spell")
    where = {name: root / name for name in ("two", "one", "whole", "part")}
    where["one+1"] = where["one"]

    def spell(*args):
        return serl_start("--recipe", "spell", *args)

    whole = spell(
        "--run_dir", where["whole"], "--steps", 3, "--save_steps", 1, "--max_ckpt_num", 3, *TINY, *WARM, *NO_PLOTS
    )
    two = spell("--run_dir", where["two"], "--steps", 2, "--save_steps", 0, *TINY, *SHIPPED)
    done = {"two": two.wait(timeout=2400)}
    one = spell("--run_dir", where["one"], "--steps", 1, *TINY, *SHIPPED, "--heldout_eval", "false", *NO_PLOTS)
    done["whole"] = whole.wait(timeout=2400)
    part = None
    if done["whole"].returncode == 0:  # the stopped run: one process fewer than running it
        cut_back(where["whole"], where["part"], 1)
        part = spell("--resume", where["part"])
    done["one"] = one.wait(timeout=2400)
    one_more = spell("--resume", where["one"], "--steps", 2) if done["one"].returncode == 0 else None
    done["part"] = part and part.wait(timeout=2400)
    done["one+1"] = one_more and one_more.wait(timeout=2400)
    yield {name: (done[name], where[name]) for name in done}
    shutil.rmtree(root, ignore_errors=True)  # about 14 GB of checkpoints


def ok(run):
    r, _ = run
    assert r is not None and r.returncode == 0, r and r.stderr[-3000:]


@pytest.mark.slow
def test_two_steps_on_the_shipped_corpus(runs):
    ok(runs["two"])
    two_steps = runs["two"][1]
    m = rows(two_steps)
    assert sorted(m) == [0, 1, 2]
    for key in (
        "eval/responder/strict",
        "eval/responder/lenient",
        "eval/verifier/accuracy",
        "eval/verifier/bad_format",
        "eval/questioner/valid_json",
    ):
        assert 0.0 <= m[0][key] <= 1.0 and 0.0 <= m[2][key] <= 1.0
    for step in (1, 2):
        assert m[step]["questioner/asked"] == 2  # one round of two clusters
        assert 0.0 <= m[step]["questioner/valid_json"] <= 1.0 and 0.0 <= m[step]["questioner/memory_fill"] <= 1.0
        for key in ("questioner/informative", "responder/accuracy", "verifier/agreement", "verifier/bad_format"):
            assert m[step][key] is None or 0.0 <= m[step][key] <= 1.0, key  # None: nothing to measure
        assert m[step]["corpus/clusters"] == 144  # 48 clusters of 6 documents, cut into twos
    for s in (1, 2):  # an update exactly when some role had samples with a reward spread (the
        # untrained model rarely writes a valid question, so often none: see experiments/spell)
        seqs = sum(m[s][f"train/{r}_seqs"] for r in ("questioner", "responder", "verifier"))
        assert ("loss/policy" in m[s]) == (seqs > 0)
    assert (two_steps / "spell_eval" / "step_0.jsonl").is_file() and (
        two_steps / "spell_eval" / "step_2.jsonl"
    ).is_file()
    assert (two_steps / "report" / "roles.png").is_file()


@pytest.mark.slow
def test_resume_matches_the_uninterrupted_run(runs):
    for name in ("two", "one", "one+1"):
        ok(runs[name])
    want, got = rows(runs["two"][1]), rows(runs["one+1"][1])
    assert sorted(got) == [1, 2]
    # without any evaluation (cheaper, and evaluation must never change training) the
    # one-step run resumed for a second step trains exactly as the uninterrupted run
    for step in (1, 2):
        assert got[step] == {k: v for k, v in want[step].items() if not k.startswith("eval/")}


def test_a_users_text_folder(tmp_path, smol_path):
    """What `serl train --recipe spell --corpus DIR` trains on (the step itself does not
    depend on where the clusters came from): prompt-budget skips, clusters of the size asked."""
    from serl.recipes.spell.config import Config
    from serl.recipes.spell.recipe import SpellRecipe

    docs = tmp_path / "notes"
    docs.mkdir()
    (docs / "boats.txt").write_text(
        "The ferry Alda sails from Korrin at seven.\n\nIt carries 40 cars.\n\n"
        "Its captain is Hel Mandt, who took over in 2011.\n"
    )
    (docs / "garden.md").write_text(
        "# Garden\n\nThe east bed grows 12 kinds of tomato.\n\nWater comes from a rain barrel behind the shed.\n"
    )
    (docs / "huge.txt").write_text("word " * 3000)  # one paragraph over the prompt budget: skipped
    corpus = SpellRecipe.prepare(Config(model=smol_path, corpus=str(docs), cluster_size=2, prompt_max_len=512))
    assert corpus.stats.skipped_long == 1 and corpus.stats.files == 3
    # short paragraphs join the next one: 2 from each file, in clusters of two, file by file
    assert [c.paragraphs[0][:12] for c in corpus.clusters] == ["The ferry Al", "# Garden\nThe"]
    assert [len(c.paragraphs) for c in corpus.clusters] == [2, 2]


@pytest.mark.slow
def test_verifier_warmup_then_self_play_resumes_exactly(runs):
    """Two warm-up steps on labelled training pairs, then one self-play step, on SmolLM2; the same
    run cut back to its first warm-up step and resumed gives the same metrics at every step."""
    # "part" is a copy of "whole" cut back to its step-1 checkpoint: files the later steps left
    # behind must not change the resumed run
    ok(runs["whole"])
    ok(runs["part"])
    want, got = rows(runs["whole"][1]), rows(runs["part"][1])
    assert sorted(want) == sorted(got) == [1, 2, 3]
    for step in (1, 2):  # the warm-up: only the verifier, 2 pairs (one rule-right, one rule-wrong) x 4 verdicts
        m = want[step]
        assert m["warmup/pairs"] == 2 and "questioner/asked" not in m
        for key in ("warmup/accuracy", "warmup/bad_format", "warmup/reward_mean"):
            assert 0.0 <= m[key] <= 1.0 or key == "warmup/reward_mean" and -1.0 <= m[key] <= 1.0
        # SmolLM2 writes malformed and valid verdicts side by side (-1 against 0/1): the verifier trains
        assert m["train/verifier_seqs"] > 0 and "loss/policy" in m and m["actor/grad_norm"] > 0
    assert "questioner/asked" in want[3] and "warmup/pairs" not in want[3]
    assert got == want
