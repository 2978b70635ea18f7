"""The fifth round's arm a takes its label-free options from the task probe by a rule fixed before
the probe ran (experiments/serl_efficacy/round5.py, ``pick_options``); numbers worked by hand."""

import pytest


@pytest.fixture()
def round5(experiment):
    return experiment("round5")


def _item(share, ok, vote="7"):
    return {"vote": vote, "share": share, "vote_ok": ok}


def test_the_mask_with_the_largest_net_signal_and_agreement_weighting(round5):
    # shares and whether the vote is right; the last problem has no answer at all
    items = [
        _item(1.0, True),
        _item(0.875, True),
        _item(0.75, False),
        _item(0.625, False),
        _item(0.5, True),
        _item(0.5, False),
        _item(0.375, False),
        _item(0.25, False),
        _item(0.0, False, vote=None),
    ]
    flags, why = round5.pick_options(items)
    # (right - wrong) / 9 among kept groups: s=0: 3-5, 0.375: 3-4, 0.5: 3-3, 0.625: 2-2, 0.75: 2-1
    assert why["net_signal_by_mask"] == pytest.approx({0.0: -2 / 9, 0.375: -1 / 9, 0.5: 0.0, 0.625: 0.0, 0.75: 1 / 9})
    assert why["mask"] == 0.75
    # clear majority (share >= 0.5): 3 of 6 right; the rest (0.375, 0.25, no answer): 0 of 3
    assert why["vote_right_clear"] == pytest.approx(0.5) and why["vote_right_other"] == 0.0
    assert flags == ["--min_majority_share", "0.75", "--agreement_weight_power", "1"]


def test_ties_keep_more_data_and_weighting_needs_both_kinds_of_group(round5):
    items = [_item(1.0, True), _item(0.5, True), _item(0.5, False)]  # net 1/3 at every threshold
    flags, why = round5.pick_options(items)
    assert list(why["net_signal_by_mask"].values()) == pytest.approx([1 / 3] * 5)
    assert why["mask"] == 0.0 and not why["agreement_weight"]  # no group below 0.5: nothing to compare
    assert flags == []


def test_weighting_stays_off_when_clear_groups_are_not_better(round5):
    items = [_item(0.75, True), _item(0.75, False), _item(0.375, True), _item(0.25, False)]
    flags, why = round5.pick_options(items)
    assert why["vote_right_clear"] == why["vote_right_other"] == 0.5
    assert "--agreement_weight_power" not in flags
    # net per problem: s=0: 2-2, 0.375: 2-1 (the 0.25 group leaves), 0.5 to 0.75: 1-1
    assert why["net_signal_by_mask"] == pytest.approx({0.0: 0.0, 0.375: 0.25, 0.5: 0.0, 0.625: 0.0, 0.75: 0.0})
    assert why["mask"] == 0.375 and flags == ["--min_majority_share", "0.375"]


def test_arm_a_refuses_to_start_without_the_probe(round5, tmp_path, monkeypatch):
    monkeypatch.setattr(round5, "PROBES", tmp_path)
    with pytest.raises(SystemExit, match="task probe"):
        round5.probe_items("gsm8k_2to3")


def _ev(tag, step, correct, machine="amd"):
    return {"tag": tag, "step": step, "correct_number": correct, "machine": machine}


def test_fifth_round_targets_by_hand(experiment):
    """Issue 62's lines over the end window (steps 90, 95, 100), worked by hand on 4 problems."""
    rd = experiment("results_decide")
    s = {"steps": 100, "extra_points": [90, 95]}
    d = [0, 0, 1, 0]
    ev = {
        "d_amd": _ev("d", 0, d),
        "d_amd_svamp": _ev("d", 0, [1, 0, 1, 1]),
        "c_050": _ev("c_050", 50, [1, 0, 1, 0]),
        "c_090": _ev("c_090", 90, [1, 1, 1, 0]),
        "c_095": _ev("c_095", 95, [1, 0, 1, 0]),
        "c_100": _ev("c_100", 100, [1, 1, 1, 1]),
        "a_050": _ev("a_050", 50, [0, 0, 0, 0]),  # one problem lost: a's low point
        "a_100": _ev("a_100", 100, [0, 0, 1, 0]),
        "a_100_svamp": _ev("a_100_svamp", 100, [1, 0, 1, 1]),
    }
    assert rd.is_end(ev["c_100"], s) and not rd.is_end(ev["c_095"], s)
    ends = {"c": ev["c_100"], "a": ev["a_100"]}
    lines = rd.targets5(ev, ends, s)
    # c: per-problem means over 90/95/100 = 1, 2/3, 1, 1/3 against d's 0, 0, 1, 0: (1 + 2/3 + 0 + 1/3) / 4 = +50
    assert lines[0].startswith("- (c) - (d), mean of steps 90, 95, 100 = +50.0 [")
    assert "(step 100 alone: +75.0 [" in lines[0] and lines[0].endswith("**met**")
    # a: only step 100 is in its window, equal to d everywhere: +0, not met
    assert lines[1].startswith("- (a) - (d), mean of steps 100 = +0.0 [+0.0, +0.0]") and lines[1].endswith(
        "**not met**"
    )
    # at step 50 a lost problem 3 of 4: -25 with every resample at -25 or 0 -> lower bound -25 < -2
    assert lines[2].startswith("- (a) never below (d): lowest lower bound") and "(step 50)" in lines[2]
    assert lines[2].endswith("**not met**")
    assert lines[3] == "- SVAMP (a) - (d) = +0.0 [+0.0, +0.0], lower bound target >= -1: **met**"
