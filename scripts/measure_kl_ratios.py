"""How far the policy's per-token log-ratios to the reference reach in a real run.

Runs ``serl train`` in this process with the options given (add ``--use_kl_loss`` and a KL
coefficient) and records, on every training forward pass of the ``ppo_clip`` objective, each
response token's log-ratio Δ = log π(a) − log π_ref(a). At the end it prints, as JSON: the
count, the extremes and percentiles of Δ and |Δ|, the largest k1/k2/k3 estimates, and the
share of tokens whose k1/k2/k3 estimate would exceed each candidate cap, per update and
overall. ``--kl_clip`` (docs/algorithms.md) was chosen from this measurement:

    PYTHONPATH=$PWD python scripts/measure_kl_ratios.py --out kl.json -- \\
        --config configs/quickstart.yaml --generator hf --use_kl_loss --init_kl_coef 1e-3 --steps 6
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

CAPS = (1.0, 2.0, 5.0, 10.0, 20.0)


def estimates(delta):
    import torch

    return {"k1": delta, "k2": 0.5 * delta * delta, "k3": torch.expm1(-delta.clamp(min=-80.0)) + delta}


def summary(delta) -> dict:
    import torch

    if delta.numel() == 0:
        return {"tokens": 0}
    a = delta.abs()
    q = torch.quantile(a.double(), torch.tensor([0.5, 0.99, 0.999], dtype=torch.float64)).tolist()
    est = estimates(delta.double())
    out = {"tokens": int(delta.numel()), "delta_min": float(delta.min()), "delta_max": float(delta.max()),
           "abs_p50": q[0], "abs_p99": q[1], "abs_p999": q[2], "abs_max": float(a.max())}
    for k, v in est.items():
        out[f"{k}_max"] = float(v.abs().max())
        out[f"{k}_share_above"] = {str(c): float((v.abs() > c).double().mean()) for c in CAPS}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="", help="also write the JSON here")
    ap.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then serl train options")
    args = ap.parse_args(argv)
    train_args = [a for a in args.train_args if a != "--"]

    import torch

    from serl.algos import objectives
    from serl.cli.train import main as train_main

    updates: list = []  # one tensor of Δ per learner update (optimizer step)
    orig = objectives.OBJECTIVES["ppo_clip"]

    def report() -> str:
        rep = {"overall": summary(torch.cat(updates)),
               "per_pass": [{k: v for k, v in summary(d).items() if not k.endswith("share_above")}
                            for d in updates]}
        text = json.dumps(rep, indent=1)
        if args.out:  # rewritten after every pass, so a run stopped early still leaves its numbers
            with open(args.out, "w") as f:
                f.write(text + "\n")
        return text

    def recording(inp, cfg):
        if inp.ref_logp is not None:
            d = (inp.logp.detach().float() - inp.ref_logp.float())[inp.mask.bool()]
            updates.append(d.cpu())
            report()
        return orig.fn(inp, cfg)

    objectives.OBJECTIVES["ppo_clip"] = dataclasses.replace(orig, fn=recording)
    rc = train_main(train_args)
    if not updates:
        print("no ppo_clip pass with reference log-probs was seen: add --use_kl_loss and a KL "
              "coefficient > 0", file=sys.stderr)
        return 2
    print(report())
    return rc


if __name__ == "__main__":
    sys.exit(main())
