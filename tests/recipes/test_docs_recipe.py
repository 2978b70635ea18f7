"""docs/recipes.md runs as written: its toy recipe package, registered from a plain
script, trains, resumes, and shows its own option in --help."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "recipes.md"


def _blocks(kind: str) -> list[tuple[str, str]]:
    text = DOC.read_text()
    return re.findall(rf"```{kind}(?: file=(\S+))?\n(.*?)```", text, re.S)


def _write_files(where: Path) -> None:
    for name, body in _blocks("python"):
        if name:
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            (where / name).write_text(body)


def _commands() -> list[str]:
    ((_, body),) = _blocks("bash")
    body = body.replace("\\\n", " ")
    return [line.split("#")[0].strip() for line in body.splitlines() if line.strip()]


def test_toy_recipe_help_and_foreign_flag(tmp_path):
    _write_files(tmp_path)
    (tmp_path / "toy_boxed" / "__init__.py").touch()
    r = subprocess.run([sys.executable, "train_boxed.py", "--help"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0 and "--boxed_reward" in r.stdout and "options of the 'boxed' recipe" in r.stdout
    assert "--enable_self_evolution" not in r.stdout
    r = subprocess.run(
        [sys.executable, "train_boxed.py", "--enable_self_evolution", "false"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "belongs to recipe 'serl'" in r.stderr


@pytest.mark.slow
def test_toy_recipe_trains_and_resumes_as_written(tmp_path, smol_path):
    _write_files(tmp_path)
    for cmd in _commands():
        cmd = cmd.replace("python ", f"{sys.executable} ", 1).replace("dataset/", f"{ROOT}/dataset/")
        r = subprocess.run(cmd, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, (cmd, r.stderr[-3000:])
    rows = [json.loads(x) for x in (tmp_path / "runs/boxed/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(0.0 <= r["reward/mean"] <= 1.0 and "time/generate" in r for r in rows)
    assert any(r.get("actor/updates", 0) >= 1 for r in rows)
    changes = (tmp_path / "runs/boxed/config_changes.jsonl").read_text()
    assert '"steps": {"was": 2, "now": 3}' in changes


class _Tok:
    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False):
        return "<user>" + messages[0]["content"]

    def __call__(self, text, add_special_tokens=False, split_special_tokens=False):
        return {"input_ids": [ord(ch) for ch in text]}


class _Engines:
    """Generator and learner in one stand-in: every other answer is boxed; updates and syncs are counted."""

    def __init__(self):
        self.calls, self.batches, self.synced = 0, [], 0

    def generate(self, prompts, n, sampling):
        from serl.engines.base import Completion

        self.calls += 1
        return [[Completion(r"\boxed{4}" if i % 2 else "four", [7, 8], list(p)) for i in range(n)] for p in prompts]

    def step(self, batch):
        self.batches.append(batch)
        return {"actor/updates": float(len(self.batches))}

    def named_weights(self):
        return iter(())

    def load_weights(self, weights):
        self.synced += 1


def test_toy_recipe_steps_in_the_run_loop(tmp_path, monkeypatch):
    """The page's recipe, as written, through one step of the run loop on stand-in engines (fast)."""
    from serl.config import registry
    from serl.config.parser import parse_args
    from serl.config.plan import plan_run
    from serl.run.context import RunContext

    _write_files(tmp_path)
    (tmp_path / "toy_boxed" / "__init__.py").touch()
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry.RECIPES, "boxed", "toy_boxed")
    registry.config_class.cache_clear()
    try:
        cfg, _ = parse_args(
            [
                "--recipe",
                "boxed",
                "--rollout_batch_size",
                "2",
                "--n_samples_per_prompt",
                "4",
                "--prompt_data",
                str(ROOT / "dataset/arith_seed.jsonl"),
            ]
        )
        plan = plan_run(cfg)
        assert (plan.objective, plan.kl, plan.updates_per_step) == ("ppo_clip", "none", 1)
        cls = registry.recipe_class("boxed")
        eng = _Engines()
        recipe = cls(RunContext(cfg, tmp_path, "m", _Tok(), eng, eng, None, None, "quiet", plan=plan), cls.prepare(cfg))
        m = recipe.step(1)
    finally:
        registry.config_class.cache_clear()
    assert m["reward/mean"] == 0.5 and m["actor/updates"] == 1.0 and eng.synced == 1
    assert {"time/generate", "time/learner", "time/sync", "time/step"} <= set(m)
    (batch,) = eng.batches
    assert len(batch.response_ids) == 8  # 2 prompts x 4 answers, one update
