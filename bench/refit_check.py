"""The first fit's leave-one-out check carried through a refit, tried outside the service in
numpy on ridge (ACCURACY.md, "The check carried through refits").

    bench/accuracy export
    python3 bench/refit_check.py tecator-moisture,tecator-fat,tecator-protein,gasoline,yarn,fermentation-sg 30 0.6

A model fed in two batches, the first `SHARE` of a split's training rows and then the rest, is
first fitted on the first batch (the evidence's `α`, and the larger one leave-one-out on those
rows asks for) and refitted on the second, which holds more than a quarter of the rows before
it. The service reads the rows back for a refit where they are few (README, "The check at a
refit") and refits by the evidence alone where it cannot, losing the check; these are refits that
need no old rows. Variants, each with the evidence's `α` on all the rows as the floor (as the
check has it):

* evidence only: the service's refit without the rows;
* the batch's rows: the exact leave-one-out error of the second batch's rows, each predicted
  from every other row (old and new: the statistics give the fit, the batch's rows their
  residuals and leverages);
* the first fit's PRESS: the leave-one-out curve the first fit computed on its rows, as a
  function of `log α` on a fixed grid, kept and read again;
* the first fit's PRESS + the batch's rows: the two curves summed, each row's leave-one-out
  error counted once, when its batch was in hand;
* both, each relative: each of the two curves divided by its own least value on the fixed grid,
  then weighed by its rows (a curve from a few rows, all of whose errors are large, then votes
  by its shape and not by its level);
* the first fit's PRESS + the batch predicted: the second term replaced by the squared errors of
  the batch's rows predicted by the first fit at each `α` (which the statistics alone give);
* the one step: the first fit's `α` and σ² kept, the posterior of all the rows under them.

Against the model fitted on all the rows in one batch (its check on all of them): RMSEP over the
splits (and its ratio to the one batch's), 95 % coverage of the Student-t intervals. Flat
intercept, the evidence's `α` and σ² on its grid, three residual degrees of freedom, σ² by the
noise update where the `α` moves (bench/loo_gate.py's fit). Splits are bench/accuracy.py's
(canonical, then REPEATS random ones); the first batch is the first SHARE of a split's training
rows in its order.
"""
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accuracy as A  # noqa: E402
import named_variants as N  # noqa: E402

STEP, REACH, BELOW = 0.25, 12.0, 40.0


class Structure:
    """The centred rows' SVD, with the centred values' projections."""

    def __init__(self, x, y):
        self.n = len(y)
        self.xm, self.u, self.d, self.vt = N.svd_centred(x)
        self.ym = y.mean()
        self.z = self.u.T @ (y - self.ym)
        self.rest2 = (y - self.ym) @ (y - self.ym) - self.z @ self.z
        self.lam = self.d ** 2

    def evidence(self):
        _, alpha, s = N.shared_scale(self.lam, self.z ** 2, self.rest2, self.n - 1)
        return alpha, s

    def press(self, rows, y, log_alphas):
        """Squared leave-one-out errors of `rows` (indices into the rows, `y` their values),
        each predicted from every other row, summed, at each of `log_alphas`."""
        u, yc = self.u[rows], y - self.ym
        out = []
        for g in log_alphas:
            shrink = self.lam / (self.lam + np.exp(g))
            residual = yc - u @ (shrink * self.z)
            leverage = 1.0 / self.n + (u ** 2) @ shrink
            out.append(np.sum((residual / (1 - leverage)) ** 2) if np.all(leverage < 1) else np.inf)
        return np.array(out)

    def predicted(self, x, y, log_alphas):
        """Squared errors of rows (x, y) predicted by this fit, summed, at each of `log_alphas`."""
        proj = (x - self.xm) @ self.vt.T
        return np.array([np.sum((y - self.ym - proj @ (self.lam / (self.lam + np.exp(g)) * self.z / self.d)) ** 2)
                         for g in log_alphas])

    def model(self, alpha, s):
        shrink = self.lam / (self.lam + alpha)
        return dict(st=self, alpha=alpha, s=s, beta=shrink * self.z / self.d, gamma=shrink.sum())

    def at(self, alpha, evidence_s):
        """The posterior at `alpha`, σ² the evidence's there if it is the evidence's `α`, else
        by the noise update."""
        shrink = self.lam / (self.lam + alpha)
        rss = self.rest2 + np.sum(self.z ** 2 * (1 - shrink) ** 2)
        return self.model(alpha, evidence_s if evidence_s is not None else max(rss, 0.0) / (self.n - 1 - shrink.sum()))


def predict(m, xt):
    st = m["st"]
    proj = (xt - st.xm) @ st.vt.T
    nu = max(st.n - 1 - m["gamma"], 3.0)
    var = (m["s"] + proj ** 2 @ (m["s"] / (st.lam + m["alpha"])) + m["s"] / st.n) * nu / (nu - 2)
    return st.ym + proj @ m["beta"], var


def checked(st, curve):
    """The fit on `st` at the `α ≥` the evidence's with the smallest `curve(log α)`."""
    alpha, s = st.evidence()
    start = np.log(alpha)
    grid = start + np.arange(0.0, max(np.log(st.lam.max()) + REACH - start, 0.0) + STEP, STEP)
    values = curve(grid)
    best = grid[int(np.argmin(values))]
    if best > start + 1e-6 and values.min() < values[0]:
        return st.at(np.exp(best), None)
    return st.at(alpha, s)


def variants(x, y, k):
    """Each variant's model for training rows (x, y), the first k of them the first batch."""
    whole, first = Structure(x, y), Structure(x[:k], y[:k])
    n = len(y)
    # The first fit's curve on a fixed grid of log α (interpolated between its points).
    fixed = np.log(first.lam.max()) + np.arange(-BELOW, REACH + STEP, STEP)
    kept = first.press(np.arange(k), y[:k], fixed)
    read = lambda g: np.interp(g, fixed, kept)  # noqa: E731
    batch = lambda g: whole.press(np.arange(k, n), y[k:], g)  # noqa: E731
    # Each curve relative to its own least value over the fixed grid, weighed by its rows: a
    # curve from a few rows, whose errors are all large, votes by its shape, not its level.
    relative_kept = kept / np.min(kept[np.isfinite(kept)])
    wide = np.log(whole.lam.max()) + np.arange(-BELOW, REACH + STEP, STEP)
    batch_least = np.min([v for v in batch(wide) if np.isfinite(v)] or [np.inf])
    relative = lambda g: (k * np.interp(g, fixed, relative_kept)  # noqa: E731
                          + (n - k) * batch(g) / batch_least)
    alpha_first = checked(first, lambda g: first.press(np.arange(k), y[:k], g))
    return {
        "one batch (checked on all)": checked(whole, lambda g: whole.press(np.arange(n), y, g)),
        "refit: evidence only": whole.at(*whole.evidence()),
        "refit: the batch's rows": checked(whole, batch),
        "refit: the first fit's PRESS": checked(whole, read),
        "refit: first PRESS + batch's rows": checked(whole, lambda g: read(g) + batch(g)),
        "refit: both, each relative, by rows": checked(whole, relative),
        "refit: first PRESS + batch predicted": checked(
            whole, lambda g: read(g) + first.predicted(x[k:], y[k:], g)),
        "one step (first fit's α, σ²)": whole.model(alpha_first["alpha"], alpha_first["s"])
        | {"gamma": np.sum(whole.lam / (whole.lam + alpha_first["alpha"]))},
    }


def run(name, repeats, share):
    ds = A.LOADERS[name](N.DATA)
    schemes = {"canonical": A.canonical_splits(ds)}
    if name in A.RANDOM_SPLIT_DATASETS and repeats:
        schemes["random"] = A.random_splits(len(ds.x), repeats)
    for scheme, splits in schemes.items():
        err, cov = {}, {}
        for split in splits:
            train, test = A.train_rows(split), split["test"]
            x, y, xt, truth = ds.x[train], ds.y[train, 0], ds.x[test], ds.y[test, 0]
            for v, m in variants(x, y, int(round(share * len(y)))).items():
                mean, var = predict(m, xt)
                err.setdefault(v, []).append(np.mean((truth - mean) ** 2))
                cov.setdefault(v, []).extend(np.abs(truth - mean) <= A.Z95 * np.sqrt(var))
        base = np.sqrt(np.mean(err["one batch (checked on all)"]))
        print(f"{name} {scheme} ({len(splits)} splits), first {share:.0%}: RMSEP (/ one batch) / 95 % coverage")
        for v in err:
            r = np.sqrt(np.mean(err[v]))
            print(f"  {v:38s} {r:.4g} ({r / base:.3f}) / {np.mean(cov[v]):.3f}")


def main(argv):
    warnings.filterwarnings("ignore")
    names = argv[1].split(",")
    repeats = int(argv[2]) if len(argv) > 2 else 30
    share = float(argv[3]) if len(argv) > 3 else 0.6
    for name in names:
        run(name, repeats, share)


if __name__ == "__main__":
    main(sys.argv)
