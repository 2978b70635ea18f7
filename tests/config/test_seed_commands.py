"""Each seed's first command, as its users type it (paths and sizes adapted), through parsing
and one tiny real step on SmolLM2; and --remote_rm_url against a real `serl serve-reward`."""

import json
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--generator", "hf", "--progress", "quiet", "--save_model", "false"]
# SeRL's README block (OpenRLHF names), sizes cut down, the label-free vote without self-instruction
SERL = [
    "--pretrain",
    "smollm2",
    "--prompt_data",
    ROOT / "dataset/arith_seed.jsonl",
    "--input_key",
    "problem",
    "--label_key",
    "answer",
    "--max_epochs",
    "1",
    "--micro_train_batch_size",
    "2",
    "--train_batch_size",
    "4",
    "--micro_rollout_batch_size",
    "4",
    "--rollout_batch_size",
    "2",
    "--n_samples_per_prompt",
    "2",
    "--generate_max_len",
    "16",
    "--actor_learning_rate",
    "5e-7",
    "--init_kl_coef",
    "1e-4",
    "--advantage_estimator",
    "reinforce",
    "--enable_self_evolution",
    "false",
    "--reward_difficulty_bounds",
    "0",
    "1",
    "--use_wandb",
    "false",
    "--max_refill_rounds",
    "1",
    *SMALL,
]


def rows(run_dir):
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def rewards_of(row):
    return {k: v for k, v in row.items() if k.startswith("reward/")}


@pytest.fixture(scope="module")
def serve_reward():
    proc = subprocess.Popen(
        [sys.executable, "-m", "serl.cli", "serve-reward", "--port", "0", "--workers", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    line = proc.stdout.readline()
    try:
        assert "POST http://127.0.0.1:" in line, proc.stderr.read()[-2000:]
        yield line.split("POST ", 1)[1].split()[0]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serl_with_serve_reward_gives_the_built_in_vote_s_rewards(serl_start, serve_reward, tmp_path):
    remote, local = tmp_path / "remote", tmp_path / "local"
    # side by side (conftest's serl_start: one thread each, so both sample alike)
    runs = [
        serl_start(
            *SERL, "--steps", 1, "--save_path", remote, "--ckpt_path", remote / "ckpt", "--remote_rm_url", serve_reward
        ),
        serl_start(*SERL, "--steps", 1, "--save_path", local),
    ]
    for r in [run.wait() for run in runs]:
        assert r.returncode == 0, r.stderr[-3000:]
    (a,), (b,) = rows(remote), rows(local)  # same seed, same samples: the same rewards
    assert rewards_of(a) == rewards_of(b) and "reward/mean" in a and a["reward/groups"] == 2


@pytest.fixture(scope="module")
def plain_pair(serl_start, tmp_path_factory):
    """The runs of the rule reward file and of spiral-rl's README command, side by side (conftest's
    serl_start: one thread each): they need nothing from each other. Name -> (result, run dir)."""
    root = tmp_path_factory.mktemp("seed_commands")
    file_run, spiral_run = root / "reward_file", root / "spiral"
    # SeRL's gt template: its reward file by SeRL's name, and its flags serl notes (--num_episodes 1 with --steps)
    runs = {
        "reward_file": (
            serl_start(
                *SERL,
                "--steps",
                1,
                "--save_path",
                file_run,
                "--reward_mode",
                "rule",
                "--remote_rm_url",
                ROOT / "reward_utils/math_verify_reward.py",
                "--num_episodes",
                "1",
                "--packing_samples",
                "--save_hf_ckpt",
                "--filtered_data_root_dir",
                root / "filtered",
            ),
            file_run,
        ),
        # spiral-rl's README: python train_spiral.py --env_ids KuhnPoker-v1 ... --pretrain ... --learning_rate
        # 0.000001 --num_ppo_epochs 2 --gamma 1 --beta 0 --temperature 1.0 --top_p 1
        "spiral": (
            serl_start(
                "--recipe",
                "spiral",
                "--env_ids",
                "TicTacToe-v0",
                "KuhnPoker-v1",
                "--pretrain",
                "smollm2",
                "--learning_rate",
                "0.000001",
                "--num_ppo_epochs",
                "1",
                "--gamma",
                "1",
                "--beta",
                "0",
                "--temperature",
                "1.0",
                "--top_p",
                "1",
                "--games_per_step",
                "2",
                "--max_turns",
                "2",
                "--generate_max_len",
                "8",
                "--steps",
                "1",
                "--run_dir",
                spiral_run,
                "--device",
                "cpu",
                *SMALL,
            ),
            spiral_run,
        ),
    }
    yield {name: (run.wait(timeout=900), path) for name, (run, path) in runs.items()}
    shutil.rmtree(root, ignore_errors=True)  # GBs of checkpoints


@pytest.fixture(scope="module")
def parquet_pair(serl_start, tmp_path_factory):
    """The runs of verl's SPIN command on a verl parquet and of SPELL on a parquet corpus, side by
    side (as plain_pair). Name -> (result, run dir)."""
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    root = tmp_path_factory.mktemp("seed_parquet")
    src = [json.loads(x) for x in (ROOT / "dataset/arith_spin_train.jsonl").read_text().splitlines()[:8]]
    table = [
        {
            "data_source": "arith",
            "prompt": [{"role": "user", "content": s["problem"]}],
            "reward_model": {"style": "rule", "ground_truth": s["answer"]},
        }
        for s in src
    ]
    data, corpus = root / "verl_in" / "train.parquet", root / "spell_in" / "train.parquet"  # the names as before
    data.parent.mkdir()
    corpus.parent.mkdir()
    pq.write_table(pa.Table.from_pylist(table), data)
    docs = [json.loads(x) for x in (ROOT / "dataset/docs_train.jsonl").read_text().splitlines()[:6]]
    pq.write_table(pa.Table.from_pylist([{"text": d["text"]} for d in docs]), corpus)
    verl_run, spell_run = root / "verl", root / "spell"
    # verl's recipe/spin README: python3 -m recipe.spin.main_spin data.train_files=... algorithm.dpo_beta=0.1 ...
    # (no --label_key: verl's reward_model.ground_truth is found by itself)
    runs = {
        "verl": (
            serl_start(
                "--recipe",
                "spin",
                "--spin_mode",
                "online",
                f"data.train_files={data}",
                "data.prompt_key=prompt",
                "--reward_mode",
                "rule",
                "actor_rollout_ref.model.path=smollm2",
                "actor_rollout_ref.actor.optim.lr=1e-6",
                "algorithm.dpo_beta=0.2",
                "trainer.ref_update_freq=1",
                "data.train_batch_size=2",
                "actor_rollout_ref.rollout.n=2",
                "data.max_response_length=12",
                "trainer.total_training_steps=1",
                f"trainer.default_local_dir={verl_run}",
                *SMALL,
            ),
            verl_run,
        ),
        "spell": (
            serl_start(
                "--recipe",
                "spell",
                "--corpus",
                corpus,
                "--corpus_cluster_key",
                "",
                "--questioner_reward",
                "azr",
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
                "--heldout_eval",
                "false",
                "--steps",
                "1",
                "--run_dir",
                spell_run,
                *SMALL,
            ),
            spell_run,
        ),
    }
    yield {name: (run.wait(timeout=900), path) for name, (run, path) in runs.items()}
    shutil.rmtree(root, ignore_errors=True)


def test_serl_with_a_reward_file(plain_pair):
    r, run = plain_pair["reward_file"]
    assert r.returncode == 0, r.stderr[-3000:]
    (row,) = rows(run)
    assert 0.0 <= row["reward/mean"] <= 1.0 and row["reward/groups"] == 2
    notes = [x for x in r.stderr.splitlines() if x.startswith("serl: note: --")]
    assert [x.split(":")[2].split()[0] for x in notes] == [
        "--num_episodes",
        "--packing_samples",
        "--save_hf_ckpt",
        "--filtered_data_root_dir",
    ]
    assert not (run.parent / "filtered").exists()


class _OnceThenDown(BaseHTTPRequestHandler):
    served = 0

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).served += 1
        ok = type(self).served == 1
        data = json.dumps({"rewards": [1.0] * len(body["query"])} if ok else {"error": "down"}).encode()
        self.send_response(200 if ok else 503)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


def test_a_reward_server_that_goes_down_stops_the_run_with_the_last_checkpoint_intact(serl_train, tmp_path):
    from serl.run.checkpoint import checkpoint_dir, complete_checkpoints, load_trainer_state

    srv = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (_OnceThenDown,), {"served": 0}))
    threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/get_reward"
    try:
        run = tmp_path / "run"
        r = serl_train(
            *SERL,
            "--steps",
            2,
            "--save_steps",
            1,
            "--save_path",
            run,
            "--remote_rm_url",
            url + "?route=main",
            "--remote_rm_retries",
            1,
            "--remote_rm_timeout",
            10,
        )
    finally:
        srv.shutdown()
        srv.server_close()
    # step 1 got its rewards and was saved; step 2's request failed twice: exit 1, naming the URL
    # (no query string), the step not trained, and the checkpoint of step 1 named as intact
    assert r.returncode == 1 and f"remote reward {url}: no rewards after 2 tries" in r.stderr, r.stderr[-3000:]
    ckpt = checkpoint_dir(run, 1)
    assert f"the last checkpoint, {ckpt} (step 1), is intact" in r.stderr, r.stderr[-3000:]
    assert "route=main" not in r.stderr  # messages name scheme, host, port and path only
    assert [x["step"] for x in rows(run)] == [1]  # step 2 logged nothing, trained nothing
    assert complete_checkpoints(run) == [ckpt] and load_trainer_state(ckpt)["step"] == 1


def test_a_reward_file_that_hangs_stops_the_run_naming_the_file(serl_train, tmp_path):
    # OpenRLHF's reward_func convention; the second call (step 2) never returns
    slow = tmp_path / "slow_reward.py"
    slow.write_text(
        "import time\n\ncalls = 0\n\ndef reward_func(queries, prompts, labels):\n    global calls\n"
        "    calls += 1\n    if calls > 1:\n        time.sleep(3600)\n    return [1.0] * len(queries)\n"
    )
    run = tmp_path / "run"
    t0 = time.monotonic()
    r = serl_train(
        *SERL, "--steps", 2, "--save_steps", 1, "--save_path", run, "--remote_rm_url", slow, "--remote_rm_timeout", 3
    )
    assert r.returncode == 1, r.stderr[-3000:]
    assert f"{slow}: reward_func did not return within 3 s (--remote_rm_timeout)" in r.stderr, r.stderr[-3000:]
    assert "(step 1), is intact" in r.stderr and [x["step"] for x in rows(run)] == [1]
    assert time.monotonic() - t0 < 600


def test_spiral_readme_command(plain_pair):
    r, run = plain_pair["spiral"]
    assert r.returncode == 0, r.stderr[-3000:]
    (row,) = rows(run)
    assert any(k.startswith("spiral/tictactoe/") for k in row) and any(k.startswith("spiral/kuhn_poker/") for k in row)
    assert "turn_discount: 1.0" in (run / "config.yaml").read_text()  # spiral-rl's --gamma 1


def test_verl_spin_command_with_a_verl_parquet(parquet_pair):
    r, run = parquet_pair["verl"]
    assert r.returncode == 0, r.stderr[-3000:]
    cfg = (run / "config.yaml").read_text()
    assert "beta: 0.2" in cfg and "ref_update: steps:1" in cfg
    (row,) = rows(run)
    assert row["pairs/groups"] == 2


def test_spell_with_a_parquet_corpus_and_the_azr_mapping(parquet_pair):
    r, run = parquet_pair["spell"]
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(rows(run)) == 1


def test_serl_s_template_on_this_machine(tmp_path):
    """SeRL's README: `zsh scripts/train/train_llama32_3b_reinforce_pp_serl_template.sh` (bash where zsh is
    missing), no GPU here: the template runs as one CPU process, the user's extra arguments making it small."""
    import os

    shim = tmp_path / "bin" / "serl"  # `serl` from this checkout
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m serl.cli "$@"\n')
    shim.chmod(0o755)
    shell = shutil.which("zsh") or "bash"
    env = dict(
        os.environ,
        PATH=f"{shim.parent}{os.pathsep}{os.environ['PATH']}",
        GPUS="0",
        MEM_GIB="64",
        PRETRAIN="smollm2",
        STEPS="1",
        PROMPT_DATA=str(ROOT / "dataset/arith_seed.jsonl"),
        SAVE_PATH=str(tmp_path / "run"),
        OMP_NUM_THREADS="1",
    )
    env.pop("RAY_ADDRESS", None)
    r = subprocess.run(
        [
            shell,
            str(ROOT / "scripts/train/train_llama32_3b_reinforce_pp_serl_template.sh"),
            "--generator",
            "hf",
            "--rollout_batch_size",
            "2",
            "--n_samples_per_prompt",
            "2",
            "--micro_rollout_batch_size",
            "2",
            "--train_batch_size",
            "4",
            "--micro_train_batch_size",
            "2",
            "--instructions_num_per_iteration",
            "2",
            "--few_shot_generation",
            "2",
            "--few_shot_generation_batch_size",
            "2",
            "--instruction_max_len",
            "48",
            "--instruction_max_attempts",
            "2",
            "--generate_max_len",
            "16",
            "--max_refill_rounds",
            "1",
            "--reward_difficulty_bounds",
            "0",
            "1",
            "--progress",
            "plain",
            "--save_model",
            "false",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "no GPU here: one process on the CPU" in r.stderr
    (row,) = rows(tmp_path / "run")
    assert row["step"] == 1 and "reward/mean" in row
    assert "step 1 |" in r.stdout
