"""Does the noise grow with the concentration? A variance shape over mordant's own answers
(ACCURACY.md, "Not adopted yet: the noise grows with the dose").

    python3 bench/noise_shape.py [--sets a,b,…] [--repeats N] [--trials T] [--prequential] [--bin PATH]

mordant is trained through its HTTP API with the default model spec on `bench/accuracy`'s splits
(named features; the canonical split, the first N random splits, the dyeing data's first T
paper trials) and predicts its test rows. Its predictive variance is `v = noise + rest`,
`noise = s` the output's noise variance (`GET …/posterior`; the Student-t's κ taken as 1, which
holds where rows are many: the dyeing data and tecator).

The what-if reshapes only the noise part, with one shape per output chosen on training rows:

    noise(x) = s · w_θ(μ(x)),   w_θ(μ) = (c + |μ|)^{2θ} · m_θ,   θ ∈ {0, ¼, ½, ¾, 1}

`μ(x)` is mordant's mean, `c` a twentieth of the root mean square of the output's training
values (a zero prediction keeps some noise), and `m_θ = mean(r²/(c+|μ|)^{2θ}) / mean(r²)` over the
residuals `r` of the rows that set the shape, so that those residuals keep, in units of the
reshaped noise, the mean square they had in units of `s`. θ is
chosen by the Gaussian likelihood of those residuals, profiled over the level and charged BIC's
`½ log n` for any θ ≠ 0:

    ℓ_θ = −½ [Σ log (c+|μ_i|)^{2θ} + n log mean(r²/(c+|μ_i|)^{2θ})]

The rows that set the shape: every training row against the final posterior (in-sample, which
understates the noise as a whole but not, to first order, its shape), or with `--prequential`
the last batch's rows as the model before that batch predicted them (a split of one batch is
then posted as two, its first 60 % and the rest, and both columns are that model's). On the
dyeing data a cell sets the shape where its dose is non-zero and mordant predicts non-zero, and
every test cell mordant predicts non-zero takes it (an output's exact zeros keep their answer);
scores are over the non-zero test cells, and a second table breaks them down by the true dose.
The means do not change: only coverage (central 50, 80, 95 %), CRPS and the 95 % interval score
do.
"""
import argparse
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accuracy as A  # noqa: E402

THETAS = (0.0, 0.25, 0.5, 0.75, 1.0)
Z = {0.5: 0.674490, 0.8: 1.281552, 0.95: A.Z95}


def train_and_predict(service, ds, split, prequential, name="shape"):
    """mordant's means on the rows that set the shape and its mean and variance on the test
    rows, each output's σ², and which rows set the shape: every training row after the last
    batch (in-sample), or with `prequential` the last batch's rows as the batches before it
    predicted them (a split of one batch is posted as two, its first 60 % and the rest)."""
    stages = split["stages"]
    if prequential and len(stages) == 1:
        rows = stages[0]
        cut = int(round(0.6 * len(rows)))
        stages = [rows[:cut], rows[cut:]]
    service.call("DELETE", f"/v1/models/{name}")
    A.create_model(service, A.model_spec(ds, "named", name, len(stages[0]), False))
    try:
        posted, version, shape_mean = 0, None, None
        for b, rows in enumerate(stages):
            if prequential and b == len(stages) - 1:
                shape_mean = A.predict(service, ds, "named", name, rows, version, 600)[0]
            body = dict(A.input_body(ds, "named", rows), batch_id=f"stage-{b}", y=ds.y[rows].tolist())
            A.expect(service.call("POST", f"/v1/models/{name}/batches", body), 202, f"batch stage-{b}")
            posted += len(rows)
            version = A.wait_folded(service, name, f"stage-{b}", posted, 600)
        shape_rows = stages[-1] if prequential else [i for stage in stages for i in stage]
        if not prequential:
            shape_mean = A.predict(service, ds, "named", name, shape_rows, version, 600)[0]
        mean_test, var_test, _ = A.predict(service, ds, "named", name, split["test"], version, 600)
        posterior = A.expect(service.call("GET", f"/v1/models/{name}/posterior"), 200, "posterior")
    finally:
        service.call("DELETE", f"/v1/models/{name}")
    noise = np.array([o.get("noise_variance") or 0.0 for o in posterior["outputs"]])
    return shape_rows, shape_mean, mean_test, var_test, noise


def choose_theta(r, mu, c):
    """θ by the profiled, BIC-charged Gaussian likelihood of the residuals r at means mu."""
    n = len(r)
    if n < 10 or not np.any(r != 0):
        return 0.0, 1.0
    best = None
    for theta in THETAS:
        shape = (c + np.abs(mu)) ** (2 * theta)
        loglik = -0.5 * (np.log(shape).sum() + n * np.log(np.mean(r * r / shape)))
        if theta != 0:
            loglik -= 0.5 * np.log(n)
        if best is None or loglik > best[0]:
            best = (loglik, theta, np.mean(r * r / shape) / np.mean(r * r))
    return best[1], best[2]


def reshaped(y_train, mean_train, mean_test, var_test, noise, dyeing, scale):
    """The test variances with each output's noise part reshaped, and the θ chosen per output;
    `scale` holds each output's root mean square over the training rows (c is a twentieth)."""
    out, chosen = var_test.copy(), []
    for k in range(var_test.shape[1]):
        used = (mean_train[:, k] != 0) & (y_train[:, k] != 0) if dyeing else np.ones(len(mean_train), bool)
        target = mean_test[:, k] != 0 if dyeing else np.ones(len(mean_test), bool)
        if noise[k] <= 0 or used.sum() < 10:
            continue
        c = scale[k] / 20
        r = y_train[used, k] - mean_train[used, k]
        theta, level = choose_theta(r, mean_train[used, k], c)
        chosen.append(theta)
        w = (c + np.abs(mean_test[target, k])) ** (2 * theta) * level
        out[target, k] = np.maximum(var_test[target, k] - noise[k] + noise[k] * w, 1e-300)
    return out, chosen


def scores(y, mean, sd):
    z = np.abs(y - mean) / np.maximum(sd, 1e-300)
    coverage = [np.mean(z <= Z[q]) for q in (0.5, 0.8, 0.95)]
    return coverage, A.gaussian_crps(y, mean, sd).mean(), A.interval_score(y, mean, sd).mean()


def main(argv):
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="dyeing,tecator-fat,tecator-moisture,tecator-protein,gasoline,yarn,"
                                          "fermentation,fermentation-sg")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--prequential", action="store_true",
                        help="the shape from the last batch's rows as the model before it predicted them")
    parser.add_argument("--bin", default=os.path.join(A.ROOT, "target/release/mordant"))
    args = parser.parse_args(argv[1:])
    service = A.Service(args.bin)
    by_dose = []
    print("| target | split | cells | θ chosen (share of outputs × splits at 0 / ¼ / ½ / ¾ / 1) | coverage 50 / 80 / 95 %,"
          " mordant → reshaped | CRPS | 95 % interval score |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    try:
        for name in args.sets.split(","):
            ds = A.LOADERS[name](A.DATA_DIR)
            dyeing = name == "dyeing"
            if dyeing:
                schemes = {"paper": A.paper_splits(len(ds.x), args.trials)}
            else:
                schemes = {"canonical": A.canonical_splits(ds)}
                if name in A.RANDOM_SPLIT_DATASETS:
                    schemes["random"] = A.random_splits(len(ds.x), args.repeats)
            for scheme, splits in schemes.items():
                ys, means, before, after, thetas = [], [], [], [], []
                for split in splits:
                    scale = np.sqrt(np.mean(ds.y[A.train_rows(split)] ** 2, axis=0))
                    rows, mean_sh, mean_te, var_te, noise = train_and_predict(service, ds, split, args.prequential)
                    new, chosen = reshaped(ds.y[rows], mean_sh, mean_te, var_te, noise, dyeing, scale)
                    truth = ds.y[split["test"]]
                    keep = truth != 0 if dyeing else np.ones(truth.shape, bool)
                    ys.append(truth[keep])
                    means.append(mean_te[keep])
                    before.append(np.sqrt(var_te[keep]))
                    after.append(np.sqrt(new[keep]))
                    thetas += chosen
                y, mean = np.concatenate(ys), np.concatenate(means)
                (c0, crps0, is0), (c1, crps1, is1) = (scores(y, mean, np.concatenate(s)) for s in (before, after))
                if dyeing:
                    by_dose.append(quintiles(y, mean, np.concatenate(before), np.concatenate(after)))
                share = " / ".join(f"{np.mean(np.isclose(thetas, t)):.2f}" for t in THETAS) if thetas else "—"
                label = f"{scheme} ×{len(splits)}" if len(splits) > 1 else scheme
                cells = f"{len(y)}" + (" non-zero" if dyeing else "")
                print(f"| {name} | {label} | {cells} | {share} | "
                      f"{' / '.join(f'{v:.3f}' for v in c0)} → {' / '.join(f'{v:.3f}' for v in c1)} | "
                      f"{crps0:.4g} → {crps1:.4g} | {is0:.4g} → {is1:.4g} |", flush=True)
    finally:
        service.stop()
    for lines in by_dose:
        print()
        print("dyeing, non-zero cells by quintile of the true dose: RMS error, median sd and coverage of the "
              "central 50 % interval, mordant → reshaped")
        print()
        print("| dose | cells | RMS error | median sd | 50 % coverage |")
        print("| --- | --- | --- | --- | --- |")
        print("\n".join(lines))


def quintiles(y, mean, sd_before, sd_after):
    """Table rows of the cells by quintile of the truth."""
    edges = np.quantile(y, np.linspace(0, 1, 6))
    bins = np.clip(np.searchsorted(edges, y, side="right") - 1, 0, 4)
    lines = []
    for k, (low, high) in enumerate(zip(edges[:-1], edges[1:])):
        cells = bins == k
        error = y[cells] - mean[cells]
        inside = [np.mean(np.abs(error) <= Z[0.5] * sd[cells]) for sd in (sd_before, sd_after)]
        lines.append(f"| {low:.3g}–{high:.3g} | {cells.sum()} | {np.sqrt(np.mean(error ** 2)):.4f} | "
                     f"{np.median(sd_before[cells]):.4f} → {np.median(sd_after[cells]):.4f} | "
                     f"{inside[0]:.3f} → {inside[1]:.3f} |")
    return lines


if __name__ == "__main__":
    main(sys.argv)
