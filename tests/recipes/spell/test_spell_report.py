"""serl report draws SPELL's role metrics in one figure and lists the main ones in the summary."""

import json

from serl.report.write import write_report


def test_roles_plot_and_summary(tmp_path):
    rows = [
        {
            "step": s,
            "questioner/valid_json": 0.5 + 0.1 * s,
            "questioner/bad_ground": 0.2,
            "questioner/informative": 0.3,
            "responder/accuracy": 0.1 * s,
            "verifier/agreement": 0.6,
            "verifier/bad_format": 0.3 - 0.1 * s,
            "questioner/reward_mean": -0.2,
            "responder/reward_mean": 0.4,
            "train/responder_groups": 2.0,
        }
        for s in (1, 2, 3)
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    names = {p.name for p in write_report(tmp_path)}
    assert "roles.png" in names
    summary = (tmp_path / "report" / "summary.md").read_text()
    for key in ("questioner/valid_json", "responder/accuracy", "verifier/bad_format"):
        assert f"| {key} |" in summary
    # lower is better for the bad-format rate: its best is the last step's 0 (formatted as 0)
    line = next(ln for ln in summary.splitlines() if ln.startswith("| verifier/bad_format |"))
    assert "(step 3)" in line.split("|")[3]
