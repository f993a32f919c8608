"""An instrument replaced: would fitting the hyperparameters again after the new instrument's
batch pay, and can the evidence tell when? In numpy, outside the service (ACCURACY.md, "Tried
and not adopted: refits an instrument's batch would earn").

    python3 bench/refit_gain.py [REPEATS]

The model is the service's ridge (flat intercept, w ~ N(0, a I), noise s; `smooth_variants`'s
evidence with K = I). Per repeat of `bench/transfer.py`'s splits (the same simulated
instruments on tecator's fat and gasoline, with the old instrument itself as a control, and
fermentation's synthetic → real rows): (a, s) are fitted by the evidence on the old rows (θ₀);
then, on the old rows and the batch together, the log evidence at θ₀ and at its new maximum θ₁.
Prints the gain log p(y | θ₁) − log p(y | θ₀) (what refitting would win in the evidence), and
the RMSE on the test rows before the batch (E0), after it at θ₀ (the one-step update's
posterior) and at θ₁ (a refit's). Then, on fermentation, ridge on both sets at fixed
shrinkages and with the real rows down-weighted (a noise variance of their own), to show what
no choice of one prior scale reaches there.

Reads the data that `bench/accuracy export` writes (target/bench/accuracy-data/).
"""
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import smooth_variants as S  # noqa: E402
import transfer as T  # noqa: E402


def rmse(mean, truth):
    return float(np.sqrt(np.mean((mean - truth) ** 2)))


def study(label, repeats):
    gains, errors = [], []
    for split, old, new in repeats:
        xo, yo = old.x[split["old"]], old.y[split["old"], 0]
        xb, yb = new.x[split["batch"]], new.y[split["batch"], 0]
        xt, yt = new.x[split["test"]], new.y[split["test"], 0]
        k = np.eye(xo.shape[1])
        a0, s0, _ = S.hyperparameters(xo, yo, k)
        x, y = np.vstack([xo, xb]), np.concatenate([yo, yb])
        a1, s1, best = S.hyperparameters(x, y, k)
        held = -S.negative_log_evidence(np.log([a0, s0]), *S.spectrum_of(x, y, k))
        gains.append(best - held)
        errors.append([S.fit(xo, yo, k, xt, (a0, s0))[0], S.fit(x, y, k, xt, (a0, s0))[0],
                       S.fit(x, y, k, xt, (a1, s1))[0], yt])
    e0, step, refit = (rmse(np.concatenate([e[i] for e in errors]), np.concatenate([e[3] for e in errors]))
                       for i in range(3))
    print(f"{label:50s} gain median {np.median(gains):6.2f}, range {min(gains):6.2f} to {max(gains):6.2f}; "
          f"E0 {e0:.4g}, one step {step:.4g}, refit {refit:.4g}", flush=True)


def fermentation_scales(ds, repeats):
    """Ridge on the synthetic rows and the real batch together at fixed shrinkages λ (in the
    inputs' units), the real rows weighted w against the synthetic ones."""
    train = np.array(ds.canonical[0])
    for lam in (1e-4, 1e-2, 1.0, 1e2, 1e4):
        for weight in (1.0, 1e-2, 1e-4):
            truth, means = [], []
            for split, _, _ in T.fermentation_repeats(ds, repeats):
                rows = np.concatenate([train, split["batch"]])
                w = np.concatenate([np.ones(len(train)), np.full(len(split["batch"]), weight)])
                x, y = ds.x[rows], ds.y[rows, 0]
                xm, ym = w @ x / w.sum(), w @ y / w.sum()
                xc = x - xm
                coef = np.linalg.solve(xc.T @ (w[:, None] * xc) + lam * np.eye(x.shape[1]), xc.T @ (w * (y - ym)))
                means.append(ym + (ds.x[split["test"]] - xm) @ coef)
                truth.append(ds.y[split["test"], 0])
            print(f"fermentation, ridge λ = {lam:g}, real rows weighted {weight:g}: RMSE "
                  f"{rmse(np.concatenate(means), np.concatenate(truth)):.4g}", flush=True)
    test = np.array(ds.canonical[1])
    print(f"fermentation: the test rows' glucose has a standard deviation of {ds.y[test, 0].std():.4g}")


def main(argv):
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    repeats = int(argv[1]) if len(argv) > 1 else 10
    for name, (old, batch) in T.SIMULATED_SPLITS.items():
        ds = S.A.LOADERS[name](S.DATA)
        for instrument in [T.Instrument("the old instrument itself", 0.0, 1.0, 0.0), *T.INSTRUMENTS]:
            study(f"{name}, {instrument.label}", T.simulated_repeats(ds, repeats, instrument, old, batch))
    ds = S.A.LOADERS["fermentation"](S.DATA)
    study("fermentation, synthetic → real", T.fermentation_repeats(ds, repeats))
    fermentation_scales(ds, repeats)


if __name__ == "__main__":
    main(sys.argv)
