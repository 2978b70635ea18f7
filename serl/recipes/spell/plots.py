"""SPELL's figure in `serl report`: its three roles' rates and rewards."""

from __future__ import annotations

from serl.report.plots import panels_plot, short_key

# fractions of samples, one panel per role
SPELL_PANELS = [
    (
        "Questioner",
        [
            "questioner/valid_json",
            "questioner/bad_ground",
            "questioner/informative",
            "questioner/repeated",
            "questioner/memory_fill",
        ],
    ),
    ("Responder", ["responder/accuracy", "responder/no_answer", "responder/verifier_lift"]),
    ("Verifier", ["verifier/agreement", "verifier/majority_agreement", "verifier/bad_format"]),
    ("Mean reward per role", ["questioner/reward_mean", "responder/reward_mean"]),
]


def plot_roles(run, claimed: set[str]):
    s = run.series
    panels = []
    for title, keys in SPELL_PANELS:
        keys = [k for k in keys if k in s]
        claimed.update(keys)
        if keys:
            label = (
                (lambda k: k.split("/")[0]) if title.startswith("Mean") else (lambda k: short_key(k).replace("_", " "))
            )
            panels.append(
                (title, "reward" if title.startswith("Mean") else "fraction", [(label(k), s[k]) for k in keys])
            )
    return panels_plot("Roles: questioner, responder, verifier", panels, cols=2 if len(panels) > 2 else 1)
