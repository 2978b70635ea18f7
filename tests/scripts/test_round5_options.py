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
