"""Where mordant's CRPS on the dyeing data comes from (ACCURACY.md, "The dyeing data's CRPS").

    python3 bench/dyeing_crps.py [TRIALS] [--bin PATH]

mordant is trained through its HTTP API (default model spec, named features) on the paper
protocol's splits (bench/accuracy.py's, the first TRIALS, default 3) and predicts test 2. Each
split's CRPS is broken down by cell: truth 0 or not, predicted exactly 0 or not. Then the
what-if: for an output whose intercept the posterior prunes, a prediction of exactly 0 (every
basis function the posterior uses is 0) gets as its variance the mean square of the output over
the training rows where those basis functions were *all* 0, counted row by row; everything else
is left as mordant answered it. The service answers such a cell from the per-function marginals
of the statistics (exact where one basis function is in use, an upper bound where several are)
with one pseudo-row at σ²: the what-if shows what the bound and the pseudo-row cost.
"""
import argparse
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accuracy as A  # noqa: E402


def train_and_predict(service, ds, split, name="crps"):
    """mordant's mean and sd on the split's test rows, and its posterior."""
    service.call("DELETE", f"/v1/models/{name}")
    A.expect(service.call("POST", "/v1/models", A.model_spec(ds, "named", name, len(split["stages"][0]), False)),
             201, "create model")
    posted, version = 0, None
    for b, rows in enumerate(split["stages"]):
        body = dict(A.input_body(ds, "named", rows), batch_id=f"stage-{b}", y=ds.y[rows].tolist())
        A.expect(service.call("POST", f"/v1/models/{name}/batches", body), 202, f"batch stage-{b}")
        posted += len(rows)
        version = A.wait_folded(service, name, f"stage-{b}", posted, 600)
    mean, variance, _ = A.predict(service, ds, "named", name, split["test"], version, 600)
    status, posterior = service.call("GET", f"/v1/models/{name}/posterior")
    A.expect((status, posterior), 200, "posterior")
    service.call("DELETE", f"/v1/models/{name}")
    return mean, np.sqrt(variance), posterior["outputs"]


def zero_sd(x, y, mean, sd, outputs):
    """sd with every exact zero of an output without intercept given the root mean square of the
    output over the training rows where its posterior's basis functions are all 0. The basis is
    the features, then the intercept (DESIGN.md §1)."""
    out = sd.copy()
    for k, output in enumerate(outputs):
        coefficients = output.get("coefficients")
        if coefficients is None or coefficients[-1] != 0:
            continue
        used = [j for j, c in enumerate(coefficients[:-1]) if c != 0]
        rows = np.all(x[:, used] == 0, axis=1)
        if rows.any():
            out[mean[:, k] == 0, k] = np.sqrt(np.mean(y[rows, k] ** 2))
    return np.maximum(out, 1e-300)


def main(argv):
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trials", nargs="?", type=int, default=3)
    parser.add_argument("--bin", default=os.path.join(A.ROOT, "target/release/mordant"))
    args = parser.parse_args(argv[1:])
    ds = A.LOADERS["dyeing"](None)
    service = A.Service(args.bin)
    try:
        for split in A.paper_splits(len(ds.x), args.trials):
            train = A.train_rows(split)
            truth = ds.y[split["test"]]
            mean, sd, outputs = train_and_predict(service, ds, split)
            crps = A.gaussian_crps(truth, mean, sd)
            print(f"trial {split['seed']}: {truth.size} cells, CRPS {crps.mean():.5f}")
            for label, cells in (("truth 0, predicted exactly 0", (truth == 0) & (mean == 0)),
                                 ("truth 0, predicted non-zero", (truth == 0) & (mean != 0)),
                                 ("truth non-zero, predicted exactly 0", (truth != 0) & (mean == 0)),
                                 ("truth non-zero, predicted non-zero", (truth != 0) & (mean != 0))):
                share = crps[cells].sum() / crps.sum()
                median = f"{np.median(sd[cells]):.4f}" if cells.any() else "—"
                print(f"  {label:36s} {cells.sum():6d} cells, {share:6.1%} of the CRPS, median sd {median}")
            honest = zero_sd(ds.x[train], ds.y[train], mean, sd, outputs)
            inside, inside_honest = (np.abs(truth - mean) <= A.Z95 * s for s in (sd, honest))
            nonzero = truth != 0
            print(f"  what-if, structural zeros with the exact mean square of their rows: CRPS "
                  f"{A.gaussian_crps(truth, mean, honest).mean():.5f}; 95 % coverage {inside.mean():.4f} → "
                  f"{inside_honest.mean():.4f}, non-zero cells {inside[nonzero].mean():.3f} → "
                  f"{inside_honest[nonzero].mean():.3f}")
    finally:
        service.stop()


if __name__ == "__main__":
    main(sys.argv)
