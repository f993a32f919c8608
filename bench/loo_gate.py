"""Leave-one-out's larger α taken only where its gain is significant, tried outside the service
in numpy on ridge (ACCURACY.md, "Tried and not adopted: a larger α only where leave-one-out's
gain is significant").

    bench/accuracy export
    python3 bench/loo_gate.py gasoline,yarn,tecator-moisture,tecator-fat,tecator-protein 30

Variants: the evidence's α; the larger α leave-one-out asks for, always (the service's rule);
the same only where the rows' paired squared leave-one-out errors fall by more than 1 or 2
standard errors of their mean. Fit as in bench/named_variants.py (flat intercept, the evidence's
α and σ² on its grid, three residual degrees of freedom), σ² by the noise update RSS/(N − 1 − γ)
where the α moves. RMSEP relative to the best of PLS and RidgeCV, 95 % coverage, splits moved.
"""
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accuracy as A  # noqa: E402
import named_variants as N  # noqa: E402


def fit(x, y, x_test, gate):
    """Posterior mean and Student-t variance at x_test of ridge at the evidence's α, or at the
    larger α leave-one-out asks for where its paired gain exceeds `gate` standard errors (never
    with `gate` None); and whether the α moved."""
    n = len(y)
    xm, u, d, vt = N.svd_centred(x)
    ym = y.mean()
    z = u.T @ (y - ym)
    rest2 = (y - ym) @ (y - ym) - z @ z
    lam, dof = d ** 2, n - 1
    _, a_ev, s_ev = N.shared_scale(lam, z ** 2, rest2, dof)

    def loo_res(alpha):
        shrink = lam / (lam + alpha)
        residual = (y - ym) - u @ (shrink * z)
        leverage = 1.0 / n + (u ** 2) @ shrink
        return residual / (1 - leverage)
    alpha, moved = a_ev, False
    if gate is not None:
        grid = np.log(a_ev) + np.arange(0, np.log(lam.max()) + 12 - np.log(a_ev), 0.25)
        scores = [np.sum(loo_res(np.exp(g)) ** 2) for g in grid]
        best = np.exp(grid[int(np.argmin(scores))])
        if best > a_ev * (1 + 1e-6):
            dd = loo_res(a_ev) ** 2 - loo_res(best) ** 2
            se = dd.std(ddof=1) / np.sqrt(n)
            if dd.mean() > gate * se:
                alpha, moved = best, True
    shrink = lam / (lam + alpha)
    gamma = shrink.sum()
    rss = rest2 + np.sum(z ** 2 * (1 - shrink) ** 2)
    s = max(rss, 0.0) / (dof - gamma) if moved else s_ev
    beta = shrink * z / d
    proj = (x_test - xm) @ vt.T
    nu = max(dof - gamma, 3.0)
    return ym + proj @ beta, (s + proj ** 2 @ (s / (lam + alpha)) + s / n) * nu / (nu - 2), moved


VARIANTS = {"evidence": None, "larger α always": -np.inf, "gate 1 SE": 1.0, "gate 2 SE": 2.0}


def main(argv):
    warnings.filterwarnings("ignore")
    names = argv[1].split(",")
    repeats = int(argv[2]) if len(argv) > 2 else 30
    for name in names:
        run(name, repeats)


def run(name, repeats):
    ds = A.LOADERS[name](N.DATA)
    schemes = {"canonical": A.canonical_splits(ds)}
    if name in A.RANDOM_SPLIT_DATASETS and repeats:
        schemes["random"] = A.random_splits(len(ds.x), repeats)
    for scheme, splits in schemes.items():
        err = {v: [] for v in VARIANTS}
        cov = {v: [] for v in VARIANTS}
        moves = {v: 0 for v in VARIANTS}
        peers = {"PLS": [], "RidgeCV": []}
        for split in splits:
            train, test = A.train_rows(split), split["test"]
            x, y, xt, truth = ds.x[train], ds.y[train, 0], ds.x[test], ds.y[test, 0]
            for v, g in VARIANTS.items():
                mean, var, moved = fit(x, y, xt, g)
                err[v].append(np.mean((truth - mean) ** 2))
                cov[v].extend(np.abs(truth - mean) <= A.Z95 * np.sqrt(var))
                moves[v] += moved
            for peer, f in (("PLS", A.fit_pls), ("RidgeCV", A.fit_ridge_cv)):
                peers[peer].append(np.mean((truth - f(x, y[:, None], xt)[0][:, 0]) ** 2))
        best = min(np.sqrt(np.mean(e)) for e in peers.values())
        print(f"{name} {scheme} ({len(splits)} splits): RMSEP (/ best peer) / 95 % coverage")
        for v in VARIANTS:
            r = np.sqrt(np.mean(err[v]))
            print(f"  {v:16s} {r:.4g} ({r / best:.3f}) / {np.mean(cov[v]):.3f}, "
                  f"moved on {moves[v]} of {len(splits)}")


if __name__ == "__main__":
    main(sys.argv)
