"""bench/roofline.py: the work formulas on a made-up model, worked out by hand, and the
table built from a made-up serl_step record (no torch, no model, no run)."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load():
    """bench/roofline.py (it imports bench/_common.py), with bench/ on the path only meanwhile."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("roofline", BENCH / "roofline.py")
        mod = sys.modules["roofline"] = importlib.util.module_from_spec(spec)  # dataclasses look it up
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(BENCH))


rf = _load()

# 2 layers, hidden 4, 2 query heads and 1 KV head of 2, MLP 8, vocabulary 10, tied head
TINY = {"num_hidden_layers": 2, "hidden_size": 4, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 2, "intermediate_size": 8, "vocab_size": 10, "tie_word_embeddings": True}


@pytest.fixture
def s():
    return rf.Shape.from_config(TINY)


def test_counts_of_a_tiny_model(s):
    # a layer: q 4x4 + k 4x2 + v 4x2 + o 4x4 + gate, up 4x8 + down 8x4 = 16+8+8+16+32+32+32 = 144
    assert (s.body(), s.head()) == (2 * 144, 10 * 4) == (288, 40)
    assert s.matmul_params() == 328
    assert s.stored_params() == 328  # tied: the embedding is the head
    assert rf.Shape.from_config(TINY | {"tie_word_embeddings": False}).stored_params() == 368
    assert s.lora_params(1) == 2 * (8 + 6 + 6 + 8 + 12 + 12 + 12) == 128  # rank x (in + out) per linear
    assert s.attn_flops(3) == 4 * 2 * 2 * 2 * 3 == 96  # QK^T and AV: 2 x 2 x ctx x (2 heads x 2) x 2 layers
    assert s.kv_bytes() == 2 * 2 * 1 * 2 * 2 == 16  # K and V x layers x kv heads x head dim x bf16


def test_real_model_sizes_agree_with_known_counts():
    smol = rf.Shape.from_config({"num_hidden_layers": 30, "hidden_size": 576, "num_attention_heads": 9,
                                 "num_key_value_heads": 3, "head_dim": 64, "intermediate_size": 1536,
                                 "vocab_size": 49152, "tie_word_embeddings": True})
    assert smol.stored_params() == 134_479_872  # 134.5 M, as bench/learner.py counts (norms aside)
    qwen = rf.Shape.from_config({"num_hidden_layers": 24, "hidden_size": 896, "num_attention_heads": 14,
                                 "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936,
                                 "tie_word_embeddings": False})
    assert qwen.head_dim == 64 and qwen.matmul_params() - 151936 * 896 == 357_826_560  # README: 358 M adapted


def test_generation_work(s):
    # 2 prompts of 3 tokens, 4 answers of 2 tokens, one call: decode batch 4
    prefill, decode = rf.generation_work(s, calls=1, prompts=2, prompt_tokens=6, seqs=4, gen_tokens=8)
    # prefill: 6 x (2 x 288, no head + attention at mean ctx (3+1)/2 = 2: 64); the weights once (656 B) + 6 KV
    assert prefill == (6 * (576 + 64), 656 + 6 * 16)
    # decode: mean ctx 3 + (2+1)/2 = 4.5; weights once per step of 4 tokens; KV of 4.5 + 1 tokens read/written
    assert decode == (8 * (656 + 144), 8 / 4 * 656 + 8 * 16 * 5.5)


def test_forward_and_update_work(s):
    # 2 sequences, 10 tokens of which 4 answer tokens, mean ctx (5+1)/2 = 3: the layers 2 x 288
    # and attention 96 on all 10 tokens, the head 2 x 40 on the 4 answer tokens;
    # micro-batches of 1: the weights read twice per pass
    fwd = rf.forward_work(s, tokens=10, answers=4, seqs=2, micro=1, passes=2, wbytes=2)
    assert fwd == [(10 * (576 + 96) + 4 * 80, 2 * 656)] * 2 == [(7040, 1312)] * 2
    # full fine-tuning: 6 per weight (Kaplan's 6N) and attention x 3; one micro-batch:
    # weights read twice (2 B) + fp32 grads read and written (8 B), AdamW 28 B + the bf16 copy 2 B
    full = rf.update_work(s, tokens=10, answers=4, seqs=2, micro=2, opt_steps=1, wbytes=2)
    assert full == [(6 * (10 * 288 + 4 * 40) + 3 * 10 * 96, 328 * 2 * 2 + 328 * 8 + 328 * 30)] == [(21120, 13776)]
    # LoRA rank 1 with checkpointing: the layers 2 forwards + input gradients (2 x 3), the head
    # forward + input gradient (2 x 2), attention x 4, adapters 6 x 128 a token; the base read
    # 3 times, gradients and AdamW for the 128 adapter weights only
    lora = rf.update_work(s, tokens=10, answers=4, seqs=2, micro=2, opt_steps=1, wbytes=2, lora_rank=1,
                          checkpointing=True)
    want = 6 * 10 * 288 + 4 * 4 * 40 + 4 * 10 * 96 + 6 * 128 * 10
    assert lora == [(want, 328 * 2 * 3 + 128 * 8 + 128 * 30)] == [(29440, 6832)]


def test_sync_work(s):
    assert rf.sync_work(s, wbytes=4) == [(0, 328 * (4 + 2))]  # fp32 read, bf16 written
    assert rf.sync_work(s, wbytes=2, lora_rank=1) == [(2 * 288, 328 * 4)]  # merge B @ A: 2 x rank per layer weight


def test_roofline_seconds_takes_the_slower_limit_per_phase():
    assert rf.roofline_seconds([(100, 10), (10, 100), (30, 30)], peak=10, bandwidth=10) == \
        {"compute": 10 + 3, "memory": 10}


CMD = ("-m serl.cli train --bf16 false --n_samples_per_prompt 2 --micro_train_batch_size 2 --rollout_batch_size 2 "
       "--generate_max_len 16 --init_kl_coef 1e-4 --bf16 true")


def record(*drop: str):
    """Two steps; the first (left out by skip=1) has numbers that would change every ratio;
    ``drop``: counts the record lacks."""
    counts = {"batch/rolled_out": [99, 2], "rollout/gen_tokens": [99, 8], "rollout/prompt_tokens": [99, 6],
              "filter/rounds": [99, 1], "response/length_mean": [99, 2.0], "train/batch_prompts": [99, 1],
              "train/logprob_tokens": [99, 10], "train/logprob_answer_tokens": [99, 4],
              "train/logprob_passes": [99, 2], "train/tokens": [99, 10], "actor/tokens": [99, 4],
              "train/sequences": [99, 2], "actor/steps": [None, None]}
    for k in drop:
        counts.pop(k)
    steps = [dict.fromkeys(("instruct", "generate", "logprobs", "learner", "sync"), 1.0),
             {"instruct": 0.0, "generate": 55.36, "logprobs": 140.8, "learner": 551.04, "sync": 26.24}]
    return {"bench": "serl_step", "model": "toy", "command": CMD, "counts": counts, "per_step_s": steps}


def test_the_whole_step_is_a_row_against_the_sum_of_its_stages(s):
    """With time/step in the record: measured 900 s against 27.68 + 14.08 + 137.76 + 13.12 s."""
    rec = record()
    rec["per_step_s"][1]["step"] = 900.0
    rows = {r["stage"]: r for r in rf.stage_rows(s, rec, {"bf16": 1000.0, "fp32": 1.0}, 100.0, skip=1)}
    assert rows["step"]["measured_s"] == 900.0 and rows["step"]["unit"] == "steps"
    assert rows["step"]["roofline_s"] == pytest.approx(27.68 + 14.08 + 137.76 + 13.12)
    assert rows["step"]["ratio"] == pytest.approx(192.64 / 900)


def test_a_configuration_reads_its_own_task_records(tmp_path):
    """qwen-gsm8k and qwen2.5-coder-0.5b share a model: each reads the records of its task."""
    arith, task = record(), dict(record(), task="gsm8k_2step", label="mine")
    arith["model"] = task["model"] = "qwen2.5-coder-0.5b"
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(task) + "\n" + json.dumps(arith) + "\n")
    got = rf.load_records(path, ["qwen-gsm8k", "qwen2.5-coder-0.5b"])
    assert got["qwen-gsm8k"]["label"] == "mine" and "task" not in got["qwen2.5-coder-0.5b"]


def test_settings_take_the_last_flag():
    st = rf.settings(CMD)
    assert (st["n"], st["micro"], st["wbytes"], st["lora"], st["kl"], st["max_len"]) == (2, 2, 2, 0, True, 16)


def test_rows_ratios_and_the_furthest_stage(s):
    # peaks 1000 FLOP/s (bf16), bandwidth 100 B/s. Rollout: the generation example above,
    # memory-bound: 752/100 + 2016/100 = 27.68 s. Log-probs: 2 passes of 7040 FLOPs (7.04 s)
    # against 656 B (6.56 s): compute, 14.08 s. Update: 13776 B = 137.76 s. Sync: 1312 B = 13.12 s.
    rows = rf.stage_rows(s, record(), {"bf16": 1000.0, "fp32": 1.0}, 100.0, skip=1)
    got = {r["stage"]: (r["bound"], r["ratio"], r["measured_per_s"], r["roofline_per_s"]) for r in rows}
    assert list(got) == ["rollout", "log-probs", "update", "weight sync"]  # no self-instruction in step 2
    want = {"rollout": ("memory", 0.5, 8 / 55.36, 8 / 27.68), "log-probs": ("compute", 0.1, 20 / 140.8, 20 / 14.08),
            "update": ("memory", 0.25, 10 / 551.04, 10 / 137.76),
            "weight sync": ("memory", 0.5, 328e-6 / 26.24, 328e-6 / 13.12)}
    for stage, (bound, ratio, measured, roof) in want.items():
        assert got[stage][0] == bound
        assert got[stage][1:] == pytest.approx((ratio, measured, roof)), stage
    assert all(r["notes"] == "" for r in rows)
    assert rf.furthest(rows).startswith("Furthest from its limit: toy log-probs, at 10.0% of its roofline (compute")
    table = rf.markdown(rows).splitlines()
    assert len(table) == 2 + 4 and "| toy | weight sync |" in table[-1] and "| 50.0% |" in table[-1]


def test_a_missing_count_is_estimated_and_said_so(s):
    rows = rf.stage_rows(s, record("rollout/gen_tokens"), {"bf16": 1000.0, "fp32": 1.0}, 100.0, skip=1)
    rollout = next(r for r in rows if r["stage"] == "rollout")
    assert rollout["ratio"] == pytest.approx(0.5)  # 2 prompts x 2 answers x mean length 2 = the 8 counted before
    assert rollout["notes"] == "no rollout/gen_tokens: answers x mean length"


def test_load_records_names_the_bad_line(tmp_path):
    good = record()
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({"bench": "other"}) + "\n")
    assert rf.load_records(path, ["toy"])["toy"]["counts"] == good["counts"]
    assert rf.load_records(path, ["toy"], label="x") == {}
    path.write_text(json.dumps({k: v for k, v in good.items() if k != "counts"}) + "\n")
    with pytest.raises(SystemExit, match=r"results.jsonl:1: a serl_step record without counts"):
        rf.load_records(path, ["toy"])
    path.write_text("\n{not json\n")
    with pytest.raises(SystemExit, match=r"results.jsonl:2: not JSON"):
        rf.load_records(path, ["toy"])


def test_main_reads_records_and_appends_the_table(tmp_path, monkeypatch, capsys, s):
    """The command from a records file to results.jsonl, with the limits and the model given."""
    lim = {"matmul_flops_per_s": {"bf16 2x2 @ 2x2": 1000.0, "fp32 2x2 @ 2x2": 1.0},
           "peak_flops_per_s": {"bf16": 1000.0, "fp32": 1.0}, "copy_bytes_per_s": 100.0,
           "triad_bytes_per_s": 90.0, "bandwidth_bytes_per_s": 100.0, "threads": 2, "stream_mib": 1}
    monkeypatch.setattr(rf, "measure_limits", lambda shapes, reps, mib: lim)
    monkeypatch.setattr(rf, "model_shape", lambda name: s)
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(json.dumps(record()) + "\n")
    assert rf.main(["--measured", str(src), "--models", "toy", "--out", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["bench"] == "roofline" and rec["skip"] == 1 and rec["limits"] == lim
    assert [(r["stage"], round(r["ratio"], 6)) for r in rec["rows"]] == \
        [("rollout", 0.5), ("log-probs", 0.1), ("update", 0.25), ("weight sync", 0.5)]
    assert rec["overall"] == rec["findings"][0] and "toy log-probs, at 10.0%" in rec["overall"]
    printed = capsys.readouterr().out
    assert "| toy | update |" in printed and "peak: bf16 0.0, fp32 0.0 GFLOP/s" in printed


def test_the_engine_dtype_comes_from_the_records_precision(s):
    """--generator_dtype auto (issue 59): a record of an fp32 engine costs 4 bytes a number, an older one 2."""
    assert rf.sync_work(s, wbytes=4, ebytes=4) == [(0, 328 * 8)]
    assert s.kv_bytes(4) == 2 * s.kv_bytes()
    cmd = "train --bf16 auto"
    assert rf.settings(cmd)["ebytes"] == 2 and rf.settings(cmd)["wbytes"] == 4  # no record: as before
    st = rf.settings(cmd, {"learner": "fp32", "generator": "float32"})
    assert (st["wbytes"], st["ebytes"]) == (4, 4)
    st = rf.settings(cmd, {"learner": "bf16", "generator": "bfloat16"})
    assert (st["wbytes"], st["ebytes"]) == (2, 2)
