"""A `save_to_disk` folder as --prompt_data trains exactly as the same rows in JSONL do
(tiny SeRL run on SmolLM2, transformers generator; metrics equal, times aside)."""
import json

import pytest

datasets = pytest.importorskip("datasets", reason="the 'datasets' dependency is not installed")


def _metrics(run_dir):
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/") and k != "wall_time"}
            for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_save_to_disk_folder_trains_as_the_jsonl_does(tmp_path, serl_train, tiny_train_args):
    jsonl = tiny_train_args[tiny_train_args.index("--prompt_data") + 1]
    rows = [json.loads(line) for line in open(jsonl) if line.strip()]
    folder = tmp_path / "seeds_hf"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(folder)
    runs = {}
    for name, src in (("jsonl", jsonl), ("folder", folder)):
        runs[name] = tmp_path / name
        r = serl_train("--run_dir", runs[name], *tiny_train_args, "--steps", "1", "--save_steps", "0",
                       "--prompt_data", src)
        assert r.returncode == 0, r.stderr[-3000:]
    mj, mf = _metrics(runs["jsonl"]), _metrics(runs["folder"])
    assert len(mj) == 1 and "reward/mean" in mj[0]
    assert mf == mj
    pool = lambda d: [json.loads(l)["item"]["text"] for l in (d / "pool.jsonl").read_text().splitlines()  # noqa: E731
                      if l.strip() and json.loads(l).get("e") == "add"]
    assert pool(runs["folder"]) == pool(runs["jsonl"])
