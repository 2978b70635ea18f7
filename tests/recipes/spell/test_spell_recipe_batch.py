"""SpellRecipe.step with a scripted generator: statuses, rewards, the three roles' groups,
dynamic sampling, memory, novelty and the advantages, against numbers worked out by hand."""

import math
import re

import pytest
import torch

from serl.engines.base import Completion
from serl.recipes.spell.config import Config
from serl.recipes.spell.corpus import Cluster, Corpus, CorpusStats
from serl.recipes.spell.prompts import QUESTIONER_PREFILL, VERIFIER_PREFILL
from serl.recipes.spell.recipe import SpellRecipe
from serl.run import state as run_state
from serl.run.context import RunContext

CLUSTERS = [
    Cluster("A", ["Acme Works was founded by Ann.", "Filler about bread."], ["a", "a"]),
    Cluster("B", ["A turtle lives in the pond.", "More filler."], ["b", "b"]),
    Cluster("C", ["The Tessa river flows through Orrin.", "Filler again."], ["c", "c"]),
]


_WORDS: list[str] = []  # the fake tokenizer's vocabulary, grown as it meets words


def text_of(ids) -> str:
    """A prompt's text back from the fake tokenizer's ids (prompts arrive as ids)."""
    return ids if isinstance(ids, str) else "".join(_WORDS[i] for i in ids)


class FakeTok:
    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False):
        return "<user>" + messages[0]["content"] + "<assistant>"

    def __call__(self, text, add_special_tokens=False, split_special_tokens=False):
        ids = []  # one token per word, with the whitespace after it
        for w in re.findall(r"\S+\s*|\s+", text):
            if w not in _WORDS:
                _WORDS.append(w)
            ids.append(_WORDS.index(w))
        return {"input_ids": ids}


def script(prompt: str, n: int) -> list[str]:
    """What the 'model' writes, by role (recognised from the compact prompts)."""
    if "Reply with JSON only" in prompt:  # questioner
        if "Acme" in prompt:
            return ['{"question": "Who founded Acme Works?", "answer": "Ann"}']
        if "turtle" in prompt:
            return ["I like turtles."]
        return ['Sure: {"question": "Which river flows through Orrin?", "answer": "Tessa"}']
    if "Do A and B give the same answer?" in prompt:  # verifier, k = 3
        cand = prompt.split("Answer A: ")[1].split("\n")[0]
        return {
            "Ann": ["Same. [[YES]]", "[[YES]]", "No. [[NO]]"],
            "Bob": ["[[YES]]", "[[yes]]", "[[ YES ]]"],
            "Ann Lee": ["[[NO]]", "hmm", "[[NO]]"],
        }[cand]
    if "[1]" not in prompt:  # grounding check, 2 samples
        return (
            ["The answer is Bob.", "The answer is Bob."]
            if "Acme" in prompt
            else ["The answer is Tessa.", "The answer is no."]
        )
    return ["The answer is Ann.", "The answer is Bob.", "I do not know.", "The answer is Ann Lee."][:n]


class ScriptedGenerator:
    def __init__(self):
        self.calls, self.prompts = 0, []

    def generate(self, prompts, n, sampling):
        self.calls += 1
        prompts = [text_of(p) for p in prompts]
        self.prompts += prompts
        out = []
        for p in prompts:
            texts = script(p, n)
            if p.endswith(QUESTIONER_PREFILL):  # prefilled: the model writes what follows
                texts = [t.split(QUESTIONER_PREFILL, 1)[-1] for t in texts]
            elif p.endswith(VERIFIER_PREFILL):  # the verdict's opening brackets are given
                texts = [t.split(VERIFIER_PREFILL, 1)[-1] for t in texts]
            assert len(texts) == n, (p, n)
            out.append([Completion(t, [hash(t) % 1000 + 1, 7], [0]) for t in texts])
        return out

    def load_weights(self, named):
        list(named)


class RecordingLearner:
    def __init__(self):
        self.batches = []

    def step(self, batch):
        self.batches.append(batch)
        return {"loss/policy": 0.0}

    def named_weights(self):
        return iter(())


class NoMath:
    def equal_many(self, pairs):
        return [False] * len(pairs)


def make_recipe(tmp_path, **over):
    cfg = Config(
        rollout_batch_size=2,
        n_samples_per_prompt=4,
        verifier_samples=3,
        grounding_samples=2,
        max_refill_rounds=2,
        **over,
    )
    ctx = RunContext(cfg, tmp_path, "fake", FakeTok(), ScriptedGenerator(), RecordingLearner(), NoMath(), None)
    recipe = SpellRecipe(ctx, Corpus(list(CLUSTERS), CorpusStats(skipped_long=2)))
    recipe.passes.order = [0, 1, 2]  # visit A, B, then C
    return recipe


@pytest.mark.parametrize("prefill", ["auto", "off"])  # the same replies, prefilled or written whole
def test_one_step_by_hand(tmp_path, prefill):
    recipe = make_recipe(tmp_path, questioner_prefill=prefill, verifier_prefill=prefill)
    m = recipe.step(1)
    asks = [p for p in recipe.generator.prompts if "Reply with JSON only" in p]
    assert len(asks) == 3 and all(p.endswith(QUESTIONER_PREFILL) is (prefill == "auto") for p in asks)
    judges = [p for p in recipe.generator.prompts if "Do A and B give the same answer?" in p]
    assert len(judges) == 3 and all(p.endswith(VERIFIER_PREFILL) is (prefill == "auto") for p in judges)
    # round 1 asks A (kept responder group) and B (bad format); round 2 asks one more: C (bad_ground)
    assert m["filter/rounds"] == 2 and m["questioner/asked"] == 3
    assert m["questioner/valid_json"] == pytest.approx(2 / 3)
    assert m["questioner/bad_ground"] == pytest.approx(1 / 2)  # C: no-document mean 0.5 >= 0.1
    assert m["questioner/informative"] == 1.0
    # responder on A: rule [1, 0, 0 (no answer), 1]; the verifier's YES majority lifts "Bob"
    # to 1, its NO majority cannot lower "Ann Lee": rewards [1, 1, 0, 1]
    assert m["responder/accuracy"] == 0.5 and m["responder/reward_mean"] == 0.75
    assert m["responder/verifier_lift"] == 0.25 and m["responder/no_answer"] == 0.25
    # 9 judgments, 1 unparseable; agreeing with the rule: Ann 2 of 3, Bob 0 of 3, Ann Lee 0 of 2
    assert m["verifier/bad_format"] == pytest.approx(1 / 9)
    assert m["verifier/agreement"] == pytest.approx(2 / 8)
    q_reward_a = math.exp(-((0.75 - 0.5) ** 2) / (2 * (1 / 6) ** 2))
    assert m["questioner/reward_mean"] == pytest.approx((q_reward_a - 1.0 - 0.5) / 3)
    assert m["questioner/memory_fill"] == pytest.approx(1 / 9)
    assert m["corpus/skipped_long"] == 2
    # trained: 3 questioner replies, A's 4 responses, and the verifier only on "Ann" (share 2/3
    # and agrees with the rule; Bob's 3/3 and Ann Lee's 2/2 are outside [0.51, 0.99])
    assert (m["train/questioner_seqs"], m["train/responder_seqs"], m["train/verifier_seqs"]) == (3, 4, 3)
    (batch,) = recipe.learner.batches
    adv = [float(a[0]) for a in batch.advantages]
    for a in batch.advantages:
        assert torch.all(a == a[0])  # GRPO: one advantage per sequence, on every token
    q = torch.tensor([q_reward_a, -1.0, -0.5])
    want_q = ((q - q.mean()) / (q.std() + 1e-6)).tolist()  # normalised over the batch
    want_r = [0.5, 0.5, -1.5, 0.5]  # [1,1,0,1]: mean .75, std .5
    s = math.sqrt(1 / 3)  # [1,1,0]: mean 2/3, std sqrt(1/3)
    want_v = [(1 / 3) / s, (1 / 3) / s, -(2 / 3) / s]
    assert adv == pytest.approx(want_q + want_r + want_v, abs=1e-4)


def test_memory_novelty_and_resume_state(tmp_path):
    recipe = make_recipe(tmp_path)
    recipe.step(1)
    state = run_state.capture(recipe, 1)
    assert state["recipe"]["memory"]["clusters"] == {
        "A": [{"evidence": [0, 1], "question": "Who founded Acme Works?", "answer": "Ann"}]
    }
    twin = make_recipe(tmp_path)
    run_state.restore(twin, state)
    recipe.generator.prompts, twin.generator.prompts = [], []
    m1, m2 = recipe.step(2), twin.step(2)
    untimed = lambda m: {k: (None if v != v else v) for k, v in m.items() if not k.startswith("time/")}  # NaN: None
    assert untimed(m1) == untimed(m2)
    assert recipe.generator.prompts == twin.generator.prompts
    # A's next prompt shows its stored question; the same question again is dropped as repeated
    a_prompt = next(p for p in recipe.generator.prompts if "Acme" in p and "Reply with JSON only" in p)
    assert "Earlier questions" in a_prompt and "Who founded Acme Works?" in a_prompt
    assert m1["questioner/repeated"] > 0


@pytest.mark.parametrize(
    "reply",
    ["", "{{{{", '<think> never closed {"question": "q", "answer": "a"}', '{"question": 3, "answer": "x"}', "x" * 5000],
)
def test_questioner_garbage_is_bad_format(tmp_path, reply):
    from serl.recipes.spell import episode

    recipe = make_recipe(tmp_path)
    q = episode.Question(CLUSTERS[0], [0], Completion(reply, [1], [0]))
    q.status, q.qa = episode.parse_questioner(reply)
    episode.settle(q)
    assert q.status == "bad_format" and q.reward == -1.0
    groups = episode.RoleGroups()
    groups.add(q, recipe.band, 2)
    assert groups.questioner == [(q.ask, -1.0)] and not groups.responder


def warm_recipe(tmp_path, **over):
    """A recipe with a 2-step verifier warm-up over two pairs: "Ann" for "Ann" (rule 1) and "Bob"
    for "Ann" (rule 0); the scripted verifier says YES, YES, NO to the first and YES x3 to the second."""
    import json

    data = tmp_path / "pairs.jsonl"
    data.write_text(
        "".join(
            json.dumps({"question": "Who founded Acme Works?", "candidate": c, "gold": "Ann"}) + "\n"
            for c in ("Ann", "Bob")
        )
    )
    return make_recipe(
        tmp_path,
        steps=3,
        verifier_warmup_steps=2,
        verifier_warmup_data=str(data),
        verifier_warmup_pairs=2,
        verifier_warmup_samples=3,
        heldout_eval=False,
        **over,
    )


def test_warmup_step_by_hand(tmp_path):
    recipe = warm_recipe(tmp_path)
    m = recipe.step(1)
    prompts = recipe.generator.prompts
    assert len(prompts) == 2 and all(
        "Do A and B give the same answer?" in p and p.endswith(VERIFIER_PREFILL) for p in prompts
    )  # only the verifier, with the self-play prompt
    # right pair: verdicts [1, 1, 0] -> rewards [1, 1, 0]; wrong pair: [1, 1, 1] -> [0, 0, 0] (no spread: dropped)
    assert m["warmup/accuracy"] == pytest.approx(2 / 6) and m["warmup/bad_format"] == 0.0
    assert m["warmup/yes_if_right"] == pytest.approx(2 / 3) and m["warmup/yes_if_wrong"] == 1.0
    assert m["warmup/reward_mean"] == pytest.approx(2 / 6) and m["train/verifier_seqs"] == 3
    assert not any(k.startswith(("questioner/", "responder/")) for k in m)
    (batch,) = recipe.learner.batches
    s = math.sqrt(1 / 3)  # [1, 1, 0]: mean 2/3, sample std sqrt(1/3)
    assert [float(a[0]) for a in batch.advantages] == pytest.approx([(1 / 3) / s, (1 / 3) / s, -(2 / 3) / s], abs=1e-4)
    m3 = recipe.step(2) and recipe.step(3)  # step 3 is self-play again
    assert "questioner/asked" in m3 and "warmup/accuracy" not in m3


def test_resume_in_the_middle_of_the_warmup(tmp_path):
    recipe = warm_recipe(tmp_path)
    recipe.step(1)
    state = run_state.capture(recipe, 1)
    assert set(state["recipe"]["warmup"]) == {"right", "wrong"}
    twin = warm_recipe(tmp_path)
    run_state.restore(twin, state)
    untimed = lambda m: {k: (None if v != v else v) for k, v in m.items() if not k.startswith("time/")}
    for step in (2, 3):
        assert untimed(recipe.step(step)) == untimed(twin.step(step))
    assert [b.response_ids for b in recipe.learner.batches[1:]] == [b.response_ids for b in twin.learner.batches]


def test_controls_no_memory_and_rule_only_reward(tmp_path):
    recipe = make_recipe(tmp_path, memory_capacity=0, responder_reward="rule")
    m = recipe.step(1)
    # responder on A: rule [1, 0, 0, 1] is the reward; the verifier's YES on "Bob" lifts nothing
    assert m["responder/reward_mean"] == 0.5 and m["responder/verifier_lift"] == 0.0
    assert m["train/verifier_seqs"] == 3  # the verifier still trains where its majority agrees with the rule
    assert recipe.memory.state_dict()["clusters"] == {} and m["questioner/memory_fill"] == 0.0
    recipe.generator.prompts = []
    recipe.step(2)
    assert not any("Earlier questions" in p for p in recipe.generator.prompts)
