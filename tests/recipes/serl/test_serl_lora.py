"""A tiny SeRL run with LoRA on SmolLM2 (transformers generator): 2 steps in one go on the
JSONL seeds, and 1 step + --resume 1 step on the same rows saved as a `save_to_disk`
folder, give the same metrics and the same final adapter (so LoRA resumes exactly and a
dataset folder trains as the JSONL does); the final save is a PEFT adapter and, with
--save_merged, the merged model in Hugging Face layout."""

import json

import pytest
import torch


def _metrics(run_dir):
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line)
        out.append({k: v for k, v in m.items() if not k.startswith("time/") and k != "wall_time"})
    return out


def _added(run_dir):
    lines = (run_dir / "pool.jsonl").read_text().splitlines()
    return [e["item"]["text"] for e in map(json.loads, filter(str.strip, lines)) if e.get("e") == "add"]


@pytest.mark.slow
def test_serl_lora_run_resumes_exactly_and_saves_adapter_and_merged(tmp_path, tiny_train_args, smol_path, serl_start):
    import datasets
    from safetensors.torch import load_file

    jsonl = tiny_train_args[tiny_train_args.index("--prompt_data") + 1]
    folder = tmp_path / "seeds_hf"
    rows = [json.loads(line) for line in open(jsonl) if line.strip()]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(folder)
    # lighter than the shared tiny run (no self-instruction): this test makes four steps
    lora = [
        "--lora_rank",
        "8",
        "--lora_alpha",
        "16",
        "--actor_learning_rate",
        "1e-3",
        "--save_model",
        "true",
        "--enable_self_evolution",
        "false",
        "--generate_max_len",
        "16",
    ]
    a, b = tmp_path / "a", tmp_path / "b"
    # the two first runs side by side (conftest's serl_start: one thread each), and so the resume too
    runs = [
        serl_start("--run_dir", a, *tiny_train_args, *lora, "--steps", "2", "--save_merged", "true"),
        serl_start(
            "--run_dir", b, *tiny_train_args, *lora, "--steps", "1", "--save_merged", "true", "--prompt_data", folder
        ),
    ]
    for r in [run.wait(timeout=3600) for run in runs]:
        assert r.returncode == 0, r.stderr[-3000:]
    r = serl_start("--resume", b, "--steps", "2").wait(timeout=3600)
    assert r.returncode == 0, r.stderr[-3000:]
    ma, mb = _metrics(a), _metrics(b)
    assert [m["step"] for m in mb] == [1, 2]
    assert ma == mb
    assert _added(a) == _added(b)
    assert ma[-1]["actor/updates"] == 2.0

    ad_a = load_file(str(a / "model" / "adapter_model.safetensors"))
    ad_b = load_file(str(b / "model" / "adapter_model.safetensors"))
    assert set(ad_a) == set(ad_b) and all(torch.equal(ad_a[k], ad_b[k]) for k in ad_a)
    assert any(k.endswith("lora_B.weight") and ad_a[k].abs().max() > 0 for k in ad_a)  # it trained
    assert not list((a / "model").glob("model*.safetensors"))  # the adapter, not a full copy
    assert not list((a / "model").glob("*.pt"))  # and no optimizer or LoRA training state

    # the merged model equals PEFT's own merge of the saved adapter onto the base
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    fp32 = dict(dtype=torch.float32)  # the learner trains and saves fp32
    theirs = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(smol_path, **fp32), str(a / "model")
    ).merge_and_unload()
    ours = dict(AutoModelForCausalLM.from_pretrained(str(a / "model_merged"), **fp32).named_parameters())
    for name, p in theirs.named_parameters():
        torch.testing.assert_close(ours[name], p, rtol=0, atol=1e-6)


def test_resume_refuses_other_lora_settings(tmp_path):
    from serl import ConfigError
    from serl.config.files import dump
    from serl.config.parser import parse_args
    from serl.run.resume import resume_config

    cfg, _ = parse_args(["--lora_rank", "8", "--run_dir", str(tmp_path)])
    dump(cfg, tmp_path / "config.yaml")
    for flag, value in (
        ("--lora_rank", "16"),
        ("--lora_alpha", "32"),
        ("--target_modules", "q_proj"),
        ("--lora_dropout", "0.1"),
    ):
        with pytest.raises(ConfigError, match=flag.lstrip("-")):
            resume_config(tmp_path, [flag, value])
