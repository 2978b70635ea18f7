"""SPIN's and online DPO's figure in `serl report`: implicit rewards, accuracy, log-probs, pairs."""

from __future__ import annotations

from serl.report.plots import panels_plot

DPO_LINES = {  # key -> (panel, legend label)
    "dpo/reward_chosen": (0, "chosen"),
    "dpo/reward_rejected": (0, "rejected"),
    "dpo/margin": (0, "margin"),
    "dpo/accuracy": (1, "chosen reward > rejected"),
    "dpo/chosen_logp": (2, "chosen (step)"),
    "dpo/rejected_logp": (2, "rejected (step)"),
    "spin/real_logp": (2, "human answers (iteration start)"),
    "spin/generated_logp": (2, "own answers (iteration start)"),
    "pairs/pairs": (3, "pairs"),
    "pairs/tied": (3, "tied groups (dropped)"),
    "pairs/dropped": (3, "dropped in all"),
    "spin/pairs": (3, "pairs of the iteration"),
}
DPO_PANELS = [
    ("Implicit rewards (beta x log-ratio to the reference)", "reward"),
    ("Preference accuracy", "fraction of pairs"),
    ("Per-token log-prob of the answers", "nats per token"),
    ("Pairs", "pairs"),
]


def plot_dpo(run, claimed: set[str]):
    """Preference recipes (SPIN, online DPO): implicit rewards, accuracy, log-probs, pairs."""
    keys = [k for k in DPO_LINES if k in run.series]
    claimed.update(keys)
    panels = [
        (title, ylabel, [(DPO_LINES[k][1], run.series[k]) for k in keys if DPO_LINES[k][0] == i])
        for i, (title, ylabel) in enumerate(DPO_PANELS)
    ]
    return panels_plot("DPO: preferences between answers", panels, cols=2)
