"""Priors for a spectrum posted as named features, tried outside the service in numpy
(ACCURACY.md, "Tried and not adopted: priors shaped by the inputs' principal components").

    python3 bench/named_variants.py gasoline,yarn,fermentation,fermentation-sg [REPEATS]
    python3 bench/named_variants.py tecator-moisture,tecator-fat,tecator-protein [REPEATS]

Named features get ridge or ARD in the service; neither knows that the columns are a curve, and
on gasoline both lose to PLS. Two priors that need no order of the columns, only their centred
covariance S = XcᵀXc / N (from the same statistics G), are tried here against ridge:

* power: w ~ N(0, a S^κ), κ ∈ {0, ¼, ½, 1, 3/2, 2} (κ = 0 is ridge). In the SVD Xc = U D Vᵀ the
  marginal variance of y along u_i is s + a d_i² (d_i²/N)^κ, so the evidence is the ridge
  evidence over other eigenvalues; κ > 0 shrinks the low-variance components harder, as PCR
  does. "power, evidence" picks κ by the evidence, charged 2 log 6 for the choice.
* PC-ARD: one prior variance per principal component (MacKay's fixed point, the data precision
  diagonal in that basis): relevance chosen per component, as PLS chooses its components.

And ridge's one scale chosen otherwise than by the evidence (ACCURACY.md, "Tecator's meat: the
evidence shrinks less than cross-validation"):

* power, κ ≤ 0: κ ∈ {−1, −½, −¼, 0} by the evidence; κ = −1 is Zellner's g-prior, which shrinks
  every component alike, κ < 0 the low-variance components less than ridge does;
* ridge, GCV: α minimising N·RSS/(N − γ)², which needs only the statistics G, b and yᵀy;
* ridge, LOO: α minimising the exact leave-one-out squared error (PRESS, as RidgeCV), which
  needs every row's leverage: a first fit has its rows, a refit from the statistics does not.

Both cross-validated variants take σ² = RSS/(N − 1 − γ) at their α. And the remedy the
literature gives a misspecified Bayesian ridge, a learning rate (Grünwald and van Ommen's
SafeBayes): the η-posterior `I/a + η G/s` (a and s the evidence's), η ∈ {1, ½, …, 2⁻⁸} chosen by
the loss of each row predicted from the rows before it (three orders of the rows), either the
posterior-expected log-loss ("SafeBayes, log-loss") or the squared error of the posterior mean
("SafeBayes, squared"); like leave-one-out it needs the rows.

Flat intercept, σ² by the evidence, at least three residual degrees of freedom (as the service);
splits are bench/accuracy.py's (canonical, then REPEATS random ones, default 30).
"""
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accuracy as A  # noqa: E402

DATA = os.path.join(A.ROOT, "target/bench/accuracy-data")
KAPPAS = [0.0, 0.25, 0.5, 1.0, 1.5, 2.0]
NEGATIVE_KAPPAS = [-1.0, -0.5, -0.25, 0.0]
MIN_RESIDUAL_DOF = 3.0


def svd_centred(x):
    xm = x.mean(0)
    u, d, vt = np.linalg.svd(x - xm, full_matrices=False)
    keep = d > 1e-6 * d[0]
    return xm, u[:, keep], d[keep], vt[keep]


def shared_scale(lam, z2, rest2, dof):
    """(−2 log evidence, α, s) maximised over α = s/a on a grid, γ ≤ dof − 3."""
    q = z2.sum() + rest2

    def profile(log_alpha):
        alpha = np.exp(log_alpha)
        misfit = max(q - np.sum(z2 * lam / (lam + alpha)), 0.0)
        s = max(misfit / dof, 1e-300)
        return dof * np.log(s) + np.sum(np.log1p(lam / alpha)) + misfit / s, s

    cap = max(dof - MIN_RESIDUAL_DOF, min(dof - 1.0, 1.0))
    grid = [g for g in np.log(lam.max()) + np.arange(-40, 12.25, 0.25)
            if np.sum(lam / (lam + np.exp(g))) <= cap]
    values = [profile(g)[0] for g in grid]
    best = grid[int(np.argmin(values))]
    objective, s = profile(best)
    return objective, np.exp(best), s


def power(x, y, x_test, kappas):
    """Posterior mean and Student-t variance at x_test of the power prior picked by the evidence."""
    n = len(y)
    xm, u, d, vt = svd_centred(x)
    ym = y.mean()
    z = u.T @ (y - ym)
    rest2 = (y - ym) @ (y - ym) - z @ z
    best = None
    for kappa in kappas:
        lam = d ** 2 * (d ** 2 / n) ** kappa
        lam = lam / lam.max() * d[0] ** 2
        objective, alpha, s = shared_scale(lam, z ** 2, rest2, n - 1)
        objective += 2 * np.log(len(kappas)) if len(kappas) > 1 else 0.0
        if best is None or objective < best[0]:
            best = (objective, lam, alpha, s)
    _, lam, alpha, s = best
    shrink = lam / (lam + alpha)
    beta = shrink * z / d
    beta_var = s * lam / (d ** 2 * (lam + alpha))
    proj = (x_test - xm) @ vt.T
    nu = max(n - 1 - shrink.sum(), 3.0)
    return ym + proj @ beta, (s + proj ** 2 @ beta_var + s / n) * nu / (nu - 2)


def ridge_cross_validated(x, y, x_test, rule):
    """Ridge with α by GCV or by exact leave-one-out on the same grid and residual cap as the
    evidence; posterior mean and Student-t variance at x_test."""
    n = len(y)
    xm, u, d, vt = svd_centred(x)
    ym = y.mean()
    z = u.T @ (y - ym)
    rest2 = (y - ym) @ (y - ym) - z @ z
    lam, dof = d ** 2, n - 1
    cap = max(dof - MIN_RESIDUAL_DOF, min(dof - 1.0, 1.0))
    grid = [g for g in np.log(lam.max()) + np.arange(-40, 12.25, 0.25)
            if np.sum(lam / (lam + np.exp(g))) <= cap]

    def fitted(alpha):
        shrink = lam / (lam + alpha)
        return shrink, rest2 + np.sum(z ** 2 * (1 - shrink) ** 2)

    def score(log_alpha):
        shrink, rss = fitted(np.exp(log_alpha))
        if rule == "gcv":
            return dof * rss / (dof - shrink.sum()) ** 2
        # Leave-one-out residuals e_i / (1 − h_i), h_i counting the free intercept's 1/n.
        residual = (y - ym) - u @ (shrink * z)
        leverage = 1.0 / n + (u ** 2) @ shrink
        return np.sum((residual / (1 - leverage)) ** 2)

    alpha = np.exp(grid[int(np.argmin([score(g) for g in grid]))])
    shrink, rss = fitted(alpha)
    gamma = shrink.sum()
    s = max(rss, 0.0) / (dof - gamma)
    beta = shrink * z / d
    proj = (x_test - xm) @ vt.T
    nu = max(dof - gamma, 3.0)
    return ym + proj @ beta, (s + proj ** 2 @ (s / (lam + alpha)) + s / n) * nu / (nu - 2)


SAFE_ETAS = [2.0 ** -k for k in range(9)]


def safe_bayes(x, y, x_test, loss):
    """Ridge's η-posterior at the η whose rows, each predicted from those before it, lose least;
    posterior mean and Student-t variance at x_test."""
    n = len(y)
    xm, u, d, vt = svd_centred(x)
    ym = y.mean()
    z = u.T @ (y - ym)
    _, alpha, s = shared_scale(d ** 2, z ** 2, (y - ym) @ (y - ym) - z @ z, n - 1)
    a = s / alpha
    # The rows in the centred data's coordinates and an intercept with a nearly flat prior.
    phi = np.hstack([np.ones((n, 1)), (x - xm) @ vt.T])
    yc = y - ym
    orders = [np.random.default_rng(seed).permutation(n) for seed in range(3)]

    def sequential(eta):
        total = 0.0
        for order in orders:
            cov = np.diag(np.r_[1e6 * (np.var(yc) + 1.0), np.full(len(d), a)])
            scaled_b = np.zeros(len(d) + 1)  # η Σ φ_i y_i / s over the rows seen
            for i in order:
                f = phi[i]
                cf = cov @ f
                error = (yc[i] - f @ (cov @ scaled_b)) ** 2
                total += error if loss == "squared" else (error + f @ cf) / (2 * s)
                cov -= np.outer(cf, cf) * (eta / s) / (1 + (eta / s) * (f @ cf))
                scaled_b += eta * f * yc[i] / s
        return total

    eta = SAFE_ETAS[int(np.argmin([sequential(e) for e in SAFE_ETAS]))]
    lam = d ** 2
    precision = 1 / a + eta * lam / s
    beta = eta * d * z / s / precision
    proj = (x_test - xm) @ vt.T
    nu = max(n - 1 - np.sum(eta * lam / s / precision), 3.0)
    return ym + proj @ beta, (s + proj ** 2 @ (1 / precision) + s / n) * nu / (nu - 2)


def pc_ard(x, y, x_test, iterations=500):
    """Posterior mean and Student-t variance at x_test with one prior variance per component."""
    n = len(y)
    xm, u, d, vt = svd_centred(x)
    ym = y.mean()
    lam, t = d ** 2, d * (u.T @ (y - ym))
    q = (y - ym) @ (y - ym)
    v, s = np.full(len(d), np.var(y) * n / lam.mean()), np.var(y)
    for _ in range(iterations):
        post = np.where(v > 0, v * s / (s + lam * v), 0.0)
        mu = post * t / s
        gamma = np.where(v > 0, 1 - post / np.where(v > 0, v, 1.0), 0.0)
        v_new = np.where(gamma > 1e-6, mu ** 2 / np.maximum(gamma, 1e-300), 0.0)
        rss = max(q - 2 * mu @ t + lam @ mu ** 2, 0.0)
        s_new = max(rss / max(n - 1 - gamma.sum(), 1.0), 1e-12 * np.var(y))
        change = max(np.max(np.abs(v_new - v) / np.maximum(np.maximum(v_new, v), 1e-300)), abs(s_new - s) / s)
        v, s = v_new, s_new
        if change < 1e-6:
            break
    post = np.where(v > 0, v * s / (s + lam * v), 0.0)
    mu = post * t / s
    gamma = np.where(v > 0, 1 - post / np.where(v > 0, v, 1.0), 0.0)
    proj = (x_test - xm) @ vt.T
    nu = max(n - 1 - gamma.sum(), 3.0)
    return ym + proj @ mu, (s + proj ** 2 @ post + s / n) * nu / (nu - 2)


VARIANTS = {"ridge": lambda x, y, t: power(x, y, t, [0.0]),
            "power, evidence": lambda x, y, t: power(x, y, t, KAPPAS),
            "power κ = 1": lambda x, y, t: power(x, y, t, [1.0]),
            "PC-ARD": pc_ard,
            "power, κ ≤ 0": lambda x, y, t: power(x, y, t, NEGATIVE_KAPPAS),
            "ridge, GCV": lambda x, y, t: ridge_cross_validated(x, y, t, "gcv"),
            "ridge, LOO": lambda x, y, t: ridge_cross_validated(x, y, t, "loo"),
            "SafeBayes, log-loss": lambda x, y, t: safe_bayes(x, y, t, "log"),
            "SafeBayes, squared": lambda x, y, t: safe_bayes(x, y, t, "squared")}


def main(argv):
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    warnings.filterwarnings("ignore", message="y residual is constant")
    names = (argv[1] if len(argv) > 1 else "gasoline,yarn").split(",")
    repeats = int(argv[2]) if len(argv) > 2 else 30
    for name in names:
        ds = A.LOADERS[name](DATA)
        schemes = {"canonical": A.canonical_splits(ds)}
        if name in A.RANDOM_SPLIT_DATASETS and repeats:
            schemes["random"] = A.random_splits(len(ds.x), repeats)
        for scheme, splits in schemes.items():
            errors = {v: [] for v in list(VARIANTS) + ["PLS", "RidgeCV", "BayesianRidge"]}
            covered = {v: [] for v in VARIANTS}
            for split in splits:
                train, test = A.train_rows(split), split["test"]
                x, y, x_test, truth = ds.x[train], ds.y[train, 0], ds.x[test], ds.y[test, 0]
                for variant, fit in VARIANTS.items():
                    mean, var = fit(x, y, x_test)
                    errors[variant].append(np.mean((truth - mean) ** 2))
                    covered[variant].extend(np.abs(truth - mean) <= A.Z95 * np.sqrt(var))
                for peer, fit in (("PLS", A.fit_pls), ("RidgeCV", A.fit_ridge_cv)):
                    errors[peer].append(np.mean((truth - fit(x, y[:, None], x_test)[0][:, 0]) ** 2))
                mean, _, _ = A.fit_per_output(_bayesian_ridge)(x, y[:, None], x_test)
                errors["BayesianRidge"].append(np.mean((truth - mean[:, 0]) ** 2))
            rmsep = {v: np.sqrt(np.mean(e)) for v, e in errors.items()}
            best = min(rmsep[p] for p in ("PLS", "RidgeCV", "BayesianRidge"))
            print(f"{name} {scheme} ({len(splits)} splits): RMSEP (/ best peer) / 95 % coverage")
            for variant, value in rmsep.items():
                cover = f" / {np.mean(covered[variant]):.3f}" if variant in covered else ""
                print(f"  {variant:15s} {value:.4g} ({value / best:.3f}){cover}")


def _bayesian_ridge():
    from sklearn.linear_model import BayesianRidge

    return BayesianRidge()


if __name__ == "__main__":
    main(sys.argv)
