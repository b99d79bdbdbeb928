"""What each method of the 2025-26 clip family would do to ppo's own token rows.

Reads the committed 2% token samples of ppo on the ramble testbed at 4x
(experiments/testbed_grid/ramble_4x) and behind the delay queue at lag 16-19
(experiments/testbed_lags/ramble_delay_4), 8 seeds each, rebuilds every (seed, step, update)
mini-batch's sampled responses as padded tensors, and applies each method's loss to them as
if it had taken that update (`src.algorithms`, the methods' own code and defaults). One
update on ppo's trajectories, not a run of the method: it says which tokens each rule acts on
and how it reweights the gradient where ppo's data are, which is what the clip_family sweep's
expectations (experiments/sweeps.yaml) were written from, before any of its runs.

Per method and config:
- pos share: the positive tokens' share of the policy-gradient magnitude, sum |w A| over the
  tokens that keep a gradient, by sign (w: the method's gradient weight, times mean length /
  length for a per-response aggregation; the runs' own `contrib_grad_pos_share` leaves that
  factor out, so for sapo it reads as the token-mean row);
- acted +/-: the share of A>0 / A<0 tokens in a state other than `none`; no-grad +/-: those
  left without a gradient (ppo's clip fraction by sign);
- entropy cov: Cov(log pi, g) over the tokens, g the token's gradient weight times A, scaled
  to a token mean (the first-order entropy law of the BAPO paper's Eq. 6: the entropy falls
  as this covariance rises), as a difference to ppo's.

    python experiments/calibration/clip_family_counterfactual.py > experiments/calibration/clip_family_counterfactual.md
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from src.algorithms import build_method  # noqa: E402
from src.algorithms.surrogate import carries_gradient  # noqa: E402

CONFIGS = {"ramble_4x": ROOT / "experiments/testbed_grid/ramble_4x/ppo/train.threads=1",
           "ramble_delay_4 (lag 16-19)": ROOT / "experiments/testbed_lags/ramble_delay_4/ppo/train.threads=1"}
# label -> (objective, parameters, aggregation): each as its yaml runs it, and two controls
LABELS = {
    "ppo": ("ppo", {}, "token-mean"),
    "clip_higher": ("clip_higher", {}, "token-mean"),
    "sapo": ("sapo", {}, "seq-mean-token-mean"),
    "sapo, token-mean": ("sapo", {}, "token-mean"),
    "ppo, seq-mean-token-mean": ("ppo", {}, "seq-mean-token-mean"),
    "dppo_tv": ("dppo_tv", {}, "token-mean"),
    "dppo_kl": ("dppo_kl", {}, "token-mean"),
    "gppo": ("gppo", {}, "token-mean"),
    "ce_gppo": ("gppo", {"beta1": 0.25}, "token-mean"),
    "dcpo": ("dcpo", {}, "token-mean"),
    "aspo": ("aspo", {}, "token-mean"),
}
COLUMNS = ("logp", "logp_behavior", "advantage", "entropy")


def minibatch(rows: pd.DataFrame) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """One update's sampled responses as right-padded [R, T] float64 tensors and their mask."""
    ids = {r: i for i, r in enumerate(rows["response_id"].unique())}
    shape = (len(ids), int(rows["position"].max()) + 1)
    where = (torch.as_tensor(rows["response_id"].map(ids).to_numpy()),
             torch.as_tensor(rows["position"].to_numpy(dtype=np.int64)))
    out = {}
    for key in COLUMNS:
        out[key] = torch.zeros(shape, dtype=torch.float64)
        out[key][where] = torch.as_tensor(rows[key].to_numpy(dtype=np.float64).copy())
    mask = torch.zeros(shape, dtype=torch.bool)
    mask[where] = True
    return out, mask


def measure(root: Path) -> pd.DataFrame:
    parts = sorted(root.glob("seed*/tokens/sampled.parquet"))
    tok = pd.concat([pd.read_parquet(p).assign(seed=p.parts[-3]) for p in parts])
    tok = tok[tok["in_loss"]]
    # a per-response aggregation weighs a token by 1 / its response's length; relative to the
    # token mean that is mean length / length (pooled over the sample, as the sampled
    # responses of one update are few)
    mean_length = len(tok) / tok.groupby(["seed", "step", "update", "response_id"]).ngroups
    sums = {label: np.zeros(9) for label in LABELS}
    for _, rows in tok.groupby(["seed", "step", "update"]):
        t, mask = minibatch(rows)
        for label, (objective, params, aggregation) in LABELS.items():
            method = build_method(objective, params, aggregation=aggregation)
            inputs = method.decision_inputs(t["logp"], t["logp_behavior"], t["advantage"], mask, t["entropy"])
            out = method.loss(t["logp"], t["logp_behavior"], t["advantage"], mask, method.decide(inputs))
            state, w, a, lp = out.clip_state[mask], out.weight[mask], t["advantage"][mask], t["logp"][mask]
            if aggregation == "seq-mean-token-mean":
                scale = mean_length / mask.sum(1, keepdim=True).expand_as(mask)[mask].double()
            else:
                scale = torch.ones_like(w)
            kept = carries_gradient(state)
            g = w * a * scale * kept
            pos, neg = a > 0, a < 0
            cov = float(((lp - lp.mean()) * (g - g.mean())).sum())
            sums[label] += [float(g[pos].abs().sum()), float(g[neg].abs().sum()), int(pos.sum()),
                            int(neg.sum()), int(((state != 0) & pos).sum()), int(((state != 0) & neg).sum()),
                            int((~kept & pos).sum()), int((~kept & neg).sum()), cov]
    n_tokens = len(tok)
    table = []
    for label, s in sums.items():
        table.append({"method": label, "pos share": s[0] / (s[0] + s[1]),
                      "acted +": s[4] / s[2], "acted -": s[5] / s[3],
                      "no-grad +": s[6] / s[2], "no-grad -": s[7] / s[3], "cov": s[8] / n_tokens})
    df = pd.DataFrame(table).set_index("method")
    df["entropy cov - ppo's"] = df["cov"] - df.loc["ppo", "cov"]
    return df.drop(columns="cov"), n_tokens, df.loc["ppo", "cov"]


def main() -> None:
    print("# The clip family on ppo's token rows (one update each, ppo's trajectories)\n")
    print("Written by `experiments/calibration/clip_family_counterfactual.py` (its docstring says "
          "what each column is).\n")
    for name, root in CONFIGS.items():
        df, n, cov = measure(root)
        print(f"## {name}: {n} loss tokens of ppo's 2% sample, 8 seeds; ppo's own entropy cov {cov:+.5f}\n")
        print("| method | " + " | ".join(df.columns) + " |")
        print("|---|" + "---|" * len(df.columns))
        for label, row in df.iterrows():
            print(f"| {label} | " + " | ".join(f"{v:+.5f}" if c.startswith("entropy") else f"{v:.4f}"
                                               for c, v in row.items()) + " |")
        print()


if __name__ == "__main__":
    main()
