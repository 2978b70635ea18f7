"""The collapse guard (serl.run.guard): the rule on scripted agreement sequences, checked by hand;
its actions, state and anchor files with stand-in engines; one tiny real run."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from serl import ConfigError
from serl.config.parser import parse_args
from serl.report.summary import describe
from serl.run.guard import BEST_DIR, BEST_META, ITEMS_FILE, CollapseGuard, GuardState, Rule, act, drop_p, judge
from serl.run.guard_anchor import ANCHOR_FILE, anchor_header, read_anchor, select_probe, write_anchor


def nested(a: float, n: int = 100) -> list[int]:
    """Per-item outcomes with agreement ``a``: the first round(a*n) items agree (a falling score
    loses items it had, so McNemar sees only drops)."""
    k = round(a * n)
    return [1] * k + [0] * (n - k)


OLD = Rule(patience=1, rule="per_check")  # the rule before issue 61: every check at alpha, one bad check fires


def run_rule(seq, rule=OLD, n=100):
    st = GuardState()
    return [judge(st, rule, step, a, nested(a, n)) for step, a in enumerate(seq)], st


# ---- McNemar, one-sided ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "before,now,want",
    [
        ([1] * 7, [0] * 7, 1 / 128),  # b=7, c=0: 2^-7
        ([1] * 10 + [0] * 3, [0] * 10 + [1] * 3, 378 / 8192),  # b=10, c=3: (286+78+13+1)/2^13
        ([1, 0], [0, 1], 3 / 4),  # b=1, c=1: P(X>=1 | 2)
        ([1, 1, 0], [1, 1, 0], 1.0),  # nothing changed
        ([0] * 5, [1] * 5, 1.0),  # only gains: P(X>=0) = 1
    ],
)
def test_drop_p_by_hand(before, now, want):
    assert drop_p(before, now) == pytest.approx(want)


# ---- the rule ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "seq,rule,verdicts,best_step",
    [
        # the scripted collapse: best 0.80 at the third check; 0.60 is 0.20 below it, p = 2^-20
        ([0.70, 0.78, 0.80, 0.79, 0.60], OLD, ["best", "best", "best", "hold", "fire"], 2),
        # a healthy run: noisy, rising, its dips stay under the margin (0.09 is not 0.10)
        (
            [0.60, 0.66, 0.63, 0.70, 0.65, 0.74, 0.72, 0.78, 0.69, 0.80],
            OLD,
            ["best", "best", "hold", "best", "hold", "best", "hold", "best", "hold", "best"],
            9,
        ),
        # exactly the margin below the best fires (0.8 - 0.1 is 0.7000000000000001 in floats)
        ([0.80, 0.70], OLD, ["best", "fire"], 0),
        ([0.80, 0.71], OLD, ["best", "hold"], 0),
        # patience 2: a good check in between resets the count
        ([0.80, 0.65, 0.75, 0.65, 0.60], Rule(patience=2, rule="per_check"), ["best", "bad", "hold", "bad", "fire"], 0),
        # a wider margin leaves the 0.20 drop alone
        (
            [0.70, 0.78, 0.80, 0.79, 0.60],
            Rule(margin=0.25, patience=1, rule="per_check"),
            ["best", "best", "best", "hold", "hold"],
            2,
        ),
    ],
)
def test_rule_on_scripted_sequences(seq, rule, verdicts, best_step):
    got, st = run_rule(seq, rule)
    assert got == verdicts
    assert st.best_step == best_step and st.best == max(seq)


def test_a_drop_that_is_not_significant_does_not_fire():
    # 20 items: 10 agreed at the best; now 4 of those agree and 4 others: 0.50 -> 0.40 (the
    # margin), but b = 6, c = 4: p = P(X >= 6 | 10) = (210+120+45+10+1)/1024 = 0.377
    best = [1] * 10 + [0] * 10
    now = [1] * 4 + [0] * 6 + [1] * 4 + [0] * 6
    assert drop_p(best, now) == pytest.approx(386 / 1024)
    for alpha, want in ((0.05, "hold"), (1.0, "fire")):
        st = GuardState()
        judge(st, Rule(alpha=alpha, patience=1, rule="per_check"), 0, 0.5, best)
        assert judge(st, Rule(alpha=alpha, patience=1, rule="per_check"), 2, 0.4, now) == want


def test_frozen_best_is_not_replaced():
    st = GuardState()
    judge(st, Rule(), 0, 0.5, nested(0.5))
    assert judge(st, Rule(), 2, 0.9, nested(0.9), frozen=True) == "hold"
    assert (st.best, st.best_step) == (0.5, 0)


@pytest.mark.parametrize(
    "mode,max_rb,want",
    [
        ("watch", 2, ["watch", "watch", "watch"]),
        ("stop", 2, ["stop"]),
        ("rollback", 2, ["rollback", "rollback", "stop"]),
        ("rollback", 0, ["stop"]),
    ],
)
def test_actions(mode, max_rb, want):
    st = GuardState()
    got = []
    for step in (4, 8, 12):
        got.append(act(st, mode, step, max_rb))
        if st.stopped:
            break
    assert got == want
    assert st.fired and st.fired_step == 4
    assert st.rollbacks == want.count("rollback")


# ---- the guard with stand-in engines -----------------------------------------------------------
class FakeLearner:
    def __init__(self):
        self.version, self.loaded, self.lr_scale = 0, [], 1.0

    def save(self, path, state=True):
        Path(path).mkdir(parents=True)
        (Path(path) / "weights").write_text(str(self.version))

    def load_policy(self, path):
        self.loaded.append((Path(path) / "weights").read_text())

    def named_weights(self):
        return iter(())


class FakeLogger:
    def __init__(self):
        self.rows = []

    def log(self, step, m):
        self.rows.append((step, dict(m)))


def make_guard(tmp_path, mode, seq, **opts):
    cfg = SimpleNamespace(
        **{
            **dict(
                collapse_guard=mode,
                guard_margin=0.10,
                guard_patience=1,
                guard_alpha=0.05,
                guard_every=1,
                guard_lr_scale=0.5,
                guard_max_rollbacks=2,
                guard_labels=False,
                guard_anchor="",
            ),
            **opts,
        }
    )
    engines = SimpleNamespace(
        generator=SimpleNamespace(load_weights=lambda w: None), learner=FakeLearner(), checker=None
    )
    g = CollapseGuard(cfg, None, engines, tmp_path, "m", FakeLogger(), ([], {}))
    scores = iter(seq)
    g.score = lambda: (lambda a: (a, nested(a), {}))(next(scores))
    return g


def drive(g, steps):
    out = []
    for step in steps:
        g.learner.version = step
        out.append(g.check(step, final=False))
        if g.st.stopped:
            break
    return out


COLLAPSE = [0.70, 0.78, 0.80, 0.79, 0.60, 0.90, 0.50]


def test_watch_logs_and_never_acts(tmp_path):
    g = make_guard(tmp_path, "watch", COLLAPSE)
    assert drive(g, range(7)) == [""] * 7
    rows = dict(g.logger.rows)
    assert [rows[s]["guard/action"] for s in range(7)] == [0, 0, 0, 0, 1, 0, 0]
    assert [rows[s]["guard/fired"] for s in range(7)] == [0, 0, 0, 0, 1, 1, 1]
    assert rows[5]["guard/best"] == 0.80 and rows[5]["guard/best_step"] == 2  # 0.90 after firing: frozen
    assert (tmp_path / BEST_DIR / "weights").read_text() == "2"
    assert json.loads((tmp_path / BEST_DIR / BEST_META).read_text()) == {"step": 2, "agreement": 0.80}
    assert g.learner.loaded == [] and not g.st.stopped
    for key in ("guard/agreement", "guard/probe_s", "guard/rollbacks", "guard/drop_p"):
        assert key in rows[4]


def test_stop_keeps_the_best_policy(tmp_path):
    g = make_guard(tmp_path, "stop", COLLAPSE)
    assert drive(g, range(7)) == ["", "", "", "", "stop"]
    assert g.learner.loaded == ["2"] and g.st.stopped and g.st.fired_step == 4


def test_rollback_then_stop(tmp_path):
    # best 0.80 at step 2; 0.60 fires (rollback 1, LR x0.5); 0.85 is a new best (step 5);
    # 0.70 fires (rollback 2, x0.25); 0.60 fires: rollbacks are spent, it stops at step 5's policy
    g = make_guard(tmp_path, "rollback", [0.70, 0.78, 0.80, 0.79, 0.60, 0.85, 0.70, 0.60])
    assert drive(g, range(8)) == [""] * 7 + ["stop"]
    assert g.learner.loaded == ["2", "5", "5"]
    assert g.st.rollbacks == 2 and g.learner.lr_scale == 0.25
    assert [r["guard/action"] for _, r in g.logger.rows] == [0, 0, 0, 0, 3, 0, 3, 2]


def test_checks_only_every_n_steps_and_at_the_end(tmp_path):
    g = make_guard(tmp_path, "watch", [0.5, 0.5, 0.5], guard_every=3)
    checked = []
    for step in range(5):
        g.check(step, final=step == 4)
        checked.append(bool(g.last_metrics))
    assert [s for s, _ in g.logger.rows] == [0, 3, 4]
    assert checked == [True, False, False, True, True]  # no stale metrics on steps without a check


@pytest.mark.parametrize("cut", [1, 3, 4, 5])
def test_resume_round_trip(tmp_path, cut):
    """State saved after ``cut`` checks and loaded into a new guard decides the rest as one
    uninterrupted guard does."""
    seq = [0.70, 0.78, 0.80, 0.79, 0.60, 0.85, 0.70, 0.60]
    whole = make_guard(tmp_path / "a", "rollback", seq)
    drive(whole, range(8))
    first = make_guard(tmp_path / "b", "rollback", seq[:cut])
    drive(first, range(cut))
    state = json.loads(json.dumps(first.state_dict()))  # what a checkpoint keeps survives a round trip
    second = make_guard(tmp_path / "b", "rollback", seq[cut:])
    second.load_state_dict(state)
    assert second.learner.lr_scale == first.learner.lr_scale
    drive(second, range(cut, 8))
    assert second.state_dict() == whole.state_dict()
    assert [r for _, r in first.logger.rows + second.logger.rows if r.pop("guard/probe_s")] == [
        r for _, r in whole.logger.rows if r.pop("guard/probe_s")
    ]


def test_signals_are_read_from_the_step_metrics():
    m = {
        "reward/agreement": 0.9,
        "actor/entropy": 0.08,
        "reward/clusters": 1.5,
        "batch/rolled_out": 16,
        "filter/difficulty/too_easy": 13,
    }
    assert CollapseGuard.step_signals(m) == {
        "guard/vote_agreement": 0.9,
        "guard/entropy": 0.08,
        "guard/clusters": 1.5,
        "guard/too_easy_share": 13 / 16,
    }
    assert CollapseGuard.step_signals({}) == {}


def test_describe(tmp_path):
    from serl.report.run_metrics import Series

    g = make_guard(tmp_path, "watch", COLLAPSE[:5])
    drive(g, range(5))
    series = {}
    for step, row in g.logger.rows:
        for k, v in row.items():
            series.setdefault(k, Series()).steps.append(step)
            series[k].values.append(float(v))
    lines = describe(series)
    assert lines[0] == (
        "collapse guard: fired at step 4 (agreement 0.60, best 0.80 at step 2); "
        "would stop here (watch mode); kept step 2"
    )
    assert describe({}) == []


# ---- the probe, anchor files, options -------------------------------------------------------------
def cfg_for(**kw):
    base = dict(
        generate_max_len=128,
        system_prompt="Box it.",
        temperature=1.0,
        top_p=1.0,
        guard_k=8,
        seed=42,
        answer_fallback="number",
        guard_probe=3,
        guard_probe_data="",
        prompt_data="seeds.jsonl",
    )
    return SimpleNamespace(**{**base, **kw})


def test_select_probe_is_seeded_and_sorted():
    prompts = [(f"q{i}", str(i)) for i in range(10)]
    a, b = select_probe(prompts, 4, 42), select_probe(prompts, 4, 42)
    assert a == b and [i for i, _, _ in a] == sorted(i for i, _, _ in a) and len(a) == 4
    assert select_probe(prompts, 4, 7) != a
    assert len(select_probe(prompts, 64, 42)) == 10


def test_anchor_reuse_and_refusals(tmp_path):
    probe = [(0, "1+1?", "2"), (3, "2+2?", "4"), (5, "3+3?", None)]
    path = tmp_path / ANCHOR_FILE
    write_anchor(path, anchor_header(cfg_for(), "m"), probe, {0: "2", 3: None, 5: "6"}, {0: 1.0, 3: 0.0, 5: 0.5})
    text = path.read_text()
    assert '"4"' not in text  # labels never go into an anchor
    assert read_anchor(path, cfg_for(), "m", probe) == {0: "2", 3: None, 5: "6"}
    assert read_anchor(path, cfg_for(temperature=0.7), "m", probe)  # recorded, not required
    with pytest.raises(ConfigError, match=r"line 1: 'model' is 'm'"):
        read_anchor(path, cfg_for(), "other", probe)
    with pytest.raises(ConfigError, match="'generate_max_len' is 128"):
        read_anchor(path, cfg_for(generate_max_len=256), "m", probe)
    with pytest.raises(ConfigError, match=r"line 3: its probe \(3 prompts\) is not this run's"):
        read_anchor(path, cfg_for(), "m", [probe[0], (4, "2+2?", "4"), probe[2]])
    with pytest.raises(ConfigError, match="line 4"):
        read_anchor(path, cfg_for(), "m", probe[:2])
    (tmp_path / "x.jsonl").write_text('{"kind": "other"}\n')
    with pytest.raises(ConfigError, match="not a serl guard anchor"):
        read_anchor(tmp_path / "x.jsonl", cfg_for(), "m", probe)


def test_load_probe_refuses_unsupported_recipes_and_missing_labels():
    from serl.config.registry import config_class
    from serl.run.guard import load_probe

    cfg = cfg_for(collapse_guard="watch", recipe="spin", guard_labels=False, guard_anchor="", label_key="answer")
    with pytest.raises(ConfigError, match="recipe 'spin' does not support"):
        load_probe(cfg, config_class("spin").SPEC, [], "m")
    seeds = [SimpleNamespace(text=f"q{i}", label=None) for i in range(5)]
    cfg.recipe, cfg.guard_labels = "serl", True
    with pytest.raises(ConfigError, match="has a 'answer' label"):
        load_probe(cfg, config_class("serl").SPEC, seeds, "m")
    cfg.guard_labels = False
    probe, anchor = load_probe(cfg, config_class("serl").SPEC, seeds, "m")
    assert len(probe) == 3 and anchor is None
    cfg.collapse_guard = "off"
    assert load_probe(cfg, config_class("serl").SPEC, seeds, "m") is None


def test_probe_from_its_own_file(tmp_path):
    """--guard_probe_data: the probe comes from that file, read as the seeds are."""
    from serl import DataError
    from serl.config.registry import config_class
    from serl.run.guard import load_probe

    f = tmp_path / "probe.jsonl"
    f.write_text("".join(json.dumps({"problem": f"What is {i} + 1?"}) + "\n" for i in range(6)))
    cfg, _ = parse_args(["--collapse_guard", "watch", "--guard_probe", "4", "--guard_probe_data", str(f)])
    probe, _ = load_probe(cfg, config_class("serl").SPEC, [], "m")
    assert probe == [(i, f"What is {i} + 1?", None) for i, _, _ in probe] and len(probe) == 4
    cfg.guard_probe_data = str(tmp_path / "missing.jsonl")
    with pytest.raises(DataError, match="missing.jsonl"):
        load_probe(cfg, config_class("serl").SPEC, [], "m")


@pytest.mark.parametrize(
    "argv,err",
    [
        (["--collapse_guard", "rollback", "--learner", "deepspeed"], "only the one-process torch learner"),
        (["--collapse_guard", "stop", "--ray"], "with --ray"),
        (["--guard_margin", "1"], "guard_margin: must lie in"),
        (["--guard_margin", "-0.1"], "guard_margin: must lie in"),
        (["--guard_every", "0"], "guard_every: must be >= 1"),
    ],
)
def test_options_refused(argv, err):
    with pytest.raises(ConfigError, match=err):
        parse_args(argv)


def test_other_recipes_refuse_the_flag(capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["--recipe", "spin", "--collapse_guard", "watch"])
    assert e.value.code == 2
    assert "belongs to recipe 'serl'" in capsys.readouterr().err


# ---- one tiny real run ---------------------------------------------------------------------------
@pytest.mark.slow
def test_guarded_run_rolls_back_and_stops(tmp_path, tiny_train_args, serl_train, monkeypatch):
    """SmolLM2, transformers generator: the anchor is sampled and the greedy probe scored for
    real; the agreements that decide are scripted (a collapse), so the rollback and the stop
    run through the runner on the real learner."""
    run = tmp_path / "run"
    monkeypatch.setenv("SERL_GUARD_SCRIPT", "1,0,0")
    args = [
        *tiny_train_args,
        "--run_dir",
        run,
        "--steps",
        "3",
        "--enable_self_evolution",
        "false",
        "--collapse_guard",
        "rollback",
        "--guard_probe",
        "2",
        "--guard_k",
        "2",
        "--guard_every",
        "1",
        "--guard_max_rollbacks",
        "1",
        "--guard_alpha",
        "1",
        "--guard_patience",
        "1",
        "--save_model",
        "true",
        "--report",
        "true",
    ]
    r = serl_train(*args)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    checks = [x for x in rows if "guard/best" in x]
    # step 0: 1.0, the best; step 1: 0.0 fires -> rollback to step 0 (LR x0.5); step 2: fires -> stop
    assert [(x["step"], x["guard/action"]) for x in checks] == [(0, 0), (1, 3), (2, 2)]
    assert checks[-1]["guard/lr_scale"] == 0.5 and checks[-1]["guard/best_step"] == 0
    assert all(x["guard/probe_s"] > 0 and x["guard/probe_n"] >= 1 for x in checks)
    assert any("guard/vote_agreement" in x for x in rows)
    assert all("guard/flip_rate" in x and "guard/level" in x and "guard/lost" in x for x in checks[1:])
    kept = [json.loads(x) for x in (run / ITEMS_FILE).read_text().splitlines()]
    assert [k["step"] for k in kept] == [0, 1, 2] and all(len(k["answers"]) == len(k["items"]) for k in kept)
    assert max(x["step"] for x in rows) == 2  # stopped before step 3
    anchor = [json.loads(x) for x in (run / ANCHOR_FILE).read_text().splitlines()]
    assert anchor[0]["kind"] == "serl-guard-anchor" and len(anchor) == 3
    assert json.loads((run / BEST_DIR / BEST_META).read_text())["step"] == 0
    assert (run / "model").is_dir() and (run / "report" / "guard.png").is_file()
    assert "collapse guard: fired at step 2" in r.stdout + r.stderr


# ---- the learner's side of a rollback: weights-only reload and the LR scale ---------------------
@pytest.mark.parametrize("lora_rank,bf16", [(0, False), (2, False), (0, True)])
def test_learner_reloads_the_kept_policy_and_scales_the_lr(tiny_path, tmp_path, lora_rank, bf16):
    import torch

    from serl.engines.base import TrainBatch
    from serl.engines.torch_learner import LearnerConfig, TorchLearner

    cfg = LearnerConfig(
        actor_learning_rate=1e-2,
        lr_warmup_ratio=0.0,
        min_lr_ratio=1.0,
        total_steps=10,
        micro_batch_size=2,
        lora_rank=lora_rank,
        lora_alpha=4.0,
        bf16=bf16,
    )
    ln = TorchLearner(tiny_path, cfg, need_ref=False)
    prompts, responses = [[3, 4, 5], [6, 7]], [[20, 21], [22, 23, 24]]

    def step():
        adv = [torch.full((len(r),), s) for r, s in zip(responses, (1.0, -1.0))]
        return ln.step(TrainBatch(prompts, responses, adv, ln.logprobs(prompts, responses)))

    step()
    kept = {n: w.clone() for n, w in ln.named_weights()}
    ln.save(str(tmp_path / "best"), state=False)  # what the guard keeps: no optimizer state
    step()
    assert any(not torch.equal(kept[n], w) for n, w in ln.named_weights())
    assert ln.optimizer.state
    ln.load_policy(str(tmp_path / "best"))
    assert all(torch.equal(kept[n], w) for n, w in ln.named_weights())
    assert not ln.optimizer.state  # Adam's moments start again
    ln.lr_scale = 0.5
    assert step()["actor/lr"] == pytest.approx(0.5e-2)  # constant schedule (min_lr_ratio 1) x 0.5


def test_probe_calls_leave_the_runs_sampling_as_it_was():
    """The generator's call counter and torch's RNG (what seeds the next rollout) are the
    same after a probe call as before it."""
    import torch

    from serl.run.guard import untouched_rng

    gen = SimpleNamespace(calls=7)
    torch.manual_seed(3)
    want = torch.rand(3)
    torch.manual_seed(3)
    with untouched_rng(gen):
        gen.calls += 2
        torch.rand(100)
    assert gen.calls == 7 and torch.equal(torch.rand(3), want)


def test_a_resume_reads_the_runs_own_anchor_copy(tmp_path):
    """--guard_anchor's file may be gone when the run resumes: its copy in the run directory is read."""
    from serl.config.registry import config_class
    from serl.run.guard import load_probe

    seeds = [SimpleNamespace(text=f"q{i}", label=None) for i in range(5)]
    cfg = cfg_for(
        collapse_guard="watch",
        recipe="serl",
        guard_labels=False,
        guard_anchor=str(tmp_path / "gone"),
        label_key="answer",
    )
    probe = select_probe([(s.text, None) for s in seeds], 3, 42)
    run = tmp_path / "run"
    run.mkdir()
    write_anchor(run / ANCHOR_FILE, anchor_header(cfg, "m"), probe, {i: "1" for i, _, _ in probe}, {})
    assert load_probe(cfg, config_class("serl").SPEC, seeds, "m", run)[1] == {i: "1" for i, _, _ in probe}
    with pytest.raises(ConfigError, match="cannot read"):
        load_probe(cfg, config_class("serl").SPEC, seeds, "m", tmp_path / "new_run")


class ScriptedGenerator:
    """Answers each probe prompt with a scripted text (sampled: the same text n times)."""

    def __init__(self, tok, answers: dict[str, str]):
        self.tok, self.answers, self.calls = tok, answers, 0

    def generate(self, prompts, n, sampling):
        from serl.engines.base import Completion

        self.calls += 1
        out = []
        for ids in prompts:
            text = next(a for q, a in self.answers.items() if q in self.tok.decode(ids))
            out.append(
                [Completion(text, [1] * (3 if text else 24), list(ids), "stop" if text else "length") for _ in range(n)]
            )
        return out


class StringChecker:
    def equal_many(self, pairs):
        return [a.strip() == b.strip() for a, b in pairs]


@pytest.mark.parametrize(
    "labelled,want_score,want_items",
    [
        (False, 0.5, [1, 0]),  # anchor "2" (q0) and "6" (q2); q1's vote had no answer; now "2" and "7"
        (True, 0.5, [1, 0]),  # labels "#### 2" (q0) and "6" (q2); q1 has none
    ],
)
def test_anchor_and_probe_score_by_hand(tmp_path, smol_tokenizer, labelled, want_score, want_items):
    probe = [(0, "Question zero", "#### 2"), (1, "Question one", None), (2, "Question two", "6")]
    cfg = SimpleNamespace(
        **{
            **vars(cfg_for(guard_k=3)),
            "collapse_guard": "watch",
            "guard_labels": labelled,
            "guard_anchor": "",
            "guard_margin": 0.1,
            "guard_patience": 1,
            "guard_alpha": 0.05,
            "guard_every": 1,
        }
    )
    gen = ScriptedGenerator(
        smol_tokenizer, {"Question zero": "so \\boxed{2}", "Question one": "", "Question two": "\\boxed{6}"}
    )
    engines = SimpleNamespace(generator=gen, learner=FakeLearner(), checker=StringChecker())
    g = CollapseGuard(cfg, SimpleNamespace(tok=smol_tokenizer), engines, tmp_path, "m", FakeLogger(), (probe, None))
    if not labelled:
        g.anchor = g.sample_anchor(tmp_path / ANCHOR_FILE)
        assert g.anchor == {0: "2", 1: None, 2: "6"}
        assert gen.calls == 0  # the run's call counter is where it was
    gen.answers["Question two"] = "\\boxed{7}"
    score, items, extra = g.score()
    assert (score, items) == (want_score, want_items)
    assert extra == {"guard/probe_n": 2, "guard/probe_cut": 0.0, "_answers": ["2", "7"], "_idx": [0, 2]}
