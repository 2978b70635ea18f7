"""serl eval keeps each finished chunk and a rerun generates only what is missing (serl.eval.resume)."""

import pytest

from serl.engines.base import Completion, Sampling
from serl.eval.metrics import generate_in_chunks
from serl.eval.resume import PARTIAL, Resumable


class Counting:
    """Answers prompt p with "p:j" (j = sample); stops (raises) once ``fail_after`` prompts were asked."""

    def __init__(self, fail_after=None):
        self.asked, self.fail_after = [], fail_after

    def generate(self, prompts, n, sampling):
        if self.fail_after is not None and len(self.asked) + len(prompts) > self.fail_after:
            raise KeyboardInterrupt  # the user stopped it
        self.asked += list(prompts)
        return [[Completion(f"{p}:{j}", [1, 2], [9]) for j in range(n)] for p in prompts]


PROMPTS = ["a", "b", "a", "c", "d"]  # "a" twice: a repeated question keeps its own samples


def test_a_stopped_evaluation_resumes_with_the_missing_prompts_only(tmp_path):
    s = Sampling(8, 1.0, 0.95, seed=0)
    first = Counting(fail_after=3)
    with pytest.raises(KeyboardInterrupt):
        generate_in_chunks(Resumable(first, tmp_path, "m", None), PROMPTS, 2, s, "x", chunk=2, log=None)
    assert first.asked == ["a", "b"] and len((tmp_path / PARTIAL).read_text().splitlines()) == 2
    second = Counting()
    again = Resumable(second, tmp_path, "m", None)
    out = generate_in_chunks(again, PROMPTS, 2, s, "x", chunk=2, log=None)
    assert second.asked == ["a", "c", "d"] and again.reused == 2  # the second "a" was never generated
    assert [[c.text for c in g] for g in out] == [[f"{p}:0", f"{p}:1"] for p in PROMPTS]
    assert out[0][0].token_ids == [1, 2] and out[0][0].prompt_ids == [9]
    # other settings (or another model) are other generations
    third = Counting()
    generate_in_chunks(Resumable(third, tmp_path, "m", None), PROMPTS[:2], 2, Sampling(8, 0.0, 1.0), "g", log=None)
    assert third.asked == ["a", "b"]
    fourth = Counting()
    generate_in_chunks(Resumable(fourth, tmp_path, "other", None), PROMPTS[:1], 2, s, "x", log=None)
    assert fourth.asked == ["a"]
    again.finished()
    assert not (tmp_path / PARTIAL).exists()


def test_a_line_cut_short_by_the_stop_is_generated_again(tmp_path):
    s = Sampling(8, 0.0, 1.0)
    generate_in_chunks(Resumable(Counting(), tmp_path, "m", None), ["a", "b"], 1, s, "x", log=None)
    text = (tmp_path / PARTIAL).read_text()
    (tmp_path / PARTIAL).write_text(text[: len(text) - 10])  # the last line lost its end
    gen = Counting()
    generate_in_chunks(Resumable(gen, tmp_path, "m", None), ["a", "b"], 1, s, "x", log=None)
    assert gen.asked == ["b"]
