"""What-if: the whole predictive variance reshaped by the residuals of later batches.

    python3 bench/shape_whatif.py [--trials N] [--first ROWS] [--step ROWS] [--bin PATH]

`bench/shape_stream.py`'s protocol (the dyeing data's paper splits posted as a first batch of
`--first` rows, then batches of `--step`), with each later batch predicted by the model before it
is posted: its cells' residuals `r` and predictive variances `v` (what the API answers, noise and
posterior together, with the service's own noise shape). Per output, on the cells where the dose
and the mean are not 0, a power θ ∈ {0, ¼, ½, ¾, 1} of `w(μ) = (c + |μ|)^{2θ}` (`c` a twentieth of
the output's root mean square over the training rows) is chosen for the standardised residuals
`z² = r²/v` by their Gaussian likelihood profiled over the level, BIC-charged as the service's
noise shape is. The test cells whose mean is not 0 then take

    shape:  v · w(μ) · mean(z²/w) / mean(z²)     (the shape alone, the level kept)
    scale:  v · w(μ) · mean(z²/w)                (the shape and the level the residuals say)

and CRPS, the 95 % interval score and the coverage of the non-zero cells are compared with the
service's own answers (`base`), trial by trial. Means do not change.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accuracy  # noqa: E402  (the API client, the data loader, the splits and the metrics)
from shape_stream import stream_split  # noqa: E402

THETAS = (0.0, 0.25, 0.5, 0.75, 1.0)


def choose(mu, z2, c):
    """The power the standardised residuals `z2` choose at answers `mu` (0 where under 10)."""
    n = len(z2)
    if n < 10 or np.sum(z2) <= 0:
        return 0.0
    size = c + np.abs(mu)
    logs = np.log(size).sum()

    def likelihood(theta):
        charge = 0.5 * np.log(n) if theta else 0.0
        return -0.5 * (2 * theta * logs + n * np.log(np.mean(z2 / size ** (2 * theta)))) - charge

    return max(THETAS, key=likelihood)


def one_trial(service, ds, split):
    """The test cells' (truth, mean, variance under base / shape / scale) for one split."""
    name = "whatif"
    service.call("DELETE", f"/v1/models/{name}")
    accuracy.create_model(service, accuracy.model_spec(ds, "named", name, len(split["stages"][0]), False))
    try:
        seen, posted, version = [], 0, None
        for b, rows in enumerate(split["stages"]):
            if b > 0:
                mean, variance, _ = accuracy.predict(service, ds, "named", name, rows, version, 600)
                seen.append((ds.y[rows], mean, variance))
            body = dict(accuracy.input_body(ds, "named", rows), batch_id=f"s{b}", y=ds.y[rows].tolist())
            accuracy.expect(service.call("POST", f"/v1/models/{name}/batches", body), 202, f"batch {b}")
            posted += len(rows)
            version = accuracy.wait_folded(service, name, f"s{b}", posted, 600)
        mean_t, var_t, _ = accuracy.predict(service, ds, "named", name, split["test"], version, 600)
    finally:
        service.call("DELETE", f"/v1/models/{name}")
    y, mu, v = (np.vstack([s[i] for s in seen]) for i in range(3))
    trained = ds.y[accuracy.train_rows(split)]
    shaped = {"base": var_t, "shape": var_t.copy(), "scale": var_t.copy()}
    for k in range(ds.y.shape[1]):
        cells = (y[:, k] != 0) & (mu[:, k] != 0) & (v[:, k] > 0)
        c = np.sqrt(np.mean(trained[:, k] ** 2)) / 20
        if cells.sum() < 10 or c <= 0:
            continue
        z2 = (y[cells, k] - mu[cells, k]) ** 2 / v[cells, k]
        theta = choose(mu[cells, k], z2, c)
        level = np.mean(z2 / (c + np.abs(mu[cells, k])) ** (2 * theta))
        on = mean_t[:, k] != 0
        w = (c + np.abs(mean_t[on, k])) ** (2 * theta)
        shaped["shape"][on, k] = var_t[on, k] * w * level / np.mean(z2)
        shaped["scale"][on, k] = var_t[on, k] * w * level
    return ds.y[split["test"]], mean_t, shaped


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--first", type=int, default=300)
    parser.add_argument("--step", type=int, default=100)
    parser.add_argument("--bin", default="target/release/mordant")
    args = parser.parse_args(argv)
    ds = accuracy.load_dyeing(None)
    splits = [stream_split(s, args.first, args.step) for s in accuracy.paper_splits(len(ds.x), args.trials)]
    service = accuracy.Service(args.bin)
    scores = {"base": [], "shape": [], "scale": []}
    try:
        for split in splits:
            y, mean, shaped = one_trial(service, ds, split)
            for key, variance in shaped.items():
                scores[key].append(accuracy.split_metrics(y, mean, np.sqrt(variance)))
    finally:
        service.stop()
    base = np.array([s["crps_sum"] / s["n"] for s in scores["base"]])
    for key, per_split in scores.items():
        total = accuracy.aggregate(per_split)
        crps = np.array([s["crps_sum"] / s["n"] for s in per_split])
        coverage = " / ".join(f"{total[f'coverage{level}_nonzero']:.3f}" for level in ("50", "80", ""))
        print(f"{key}: CRPS {total['crps']:.6g} (ratio {crps.sum() / base.sum():.4f}, lower in "
              f"{int((crps < base).sum())} of {len(crps)}), interval score {total['interval_score']:.5g}, "
              f"non-zero cells covered {coverage}")


if __name__ == "__main__":
    main(sys.argv[1:])
