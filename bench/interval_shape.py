"""How much of the over-wide intervals is the predictive's shape, in numpy (ACCURACY.md,
"Coverage at 50, 80 and 95 %").

    python3 bench/interval_shape.py yarn|gasoline|fermentation|fermentation-sg|... [REPEATS] [uncapped|interior|noise=F]

The service's ridge on a data set's random splits (REPEATS, default 100; 0: the canonical
split): flat intercept, a and σ² by the evidence with at least three residual degrees of freedom
(γ ≤ N − 4, `evidence::residual_cap`), and its predictive, the mean with
`variance = κ(s + φᵀΣAΣφ) + φᵀΣA₀Σφ`, κ = ν/(ν − 2), ν = N − 1 − γ. Coverage of the central 50,
80 and 95 % intervals read two ways: mean ± z·√variance (what a client of the API can draw, and
`bench/accuracy` does), and the predictive's own quantiles, `√(s + φᵀΣAΣφ)·t_ν` (what σ² drives)
plus an independent `N(0, φᵀΣA₀Σφ)` (the prior's part). `uncapped`: a and σ² at the evidence's
unconstrained maximum instead (ν then still clamped at 3 in κ, as the service would). `interior`:
the evidence's best local maximum inside the cap (a mode, not the cap's edge), the cap's edge only
where the profile has none (it says on how many splits it found one). `noise=F`:
no cap, but an inverse-gamma hyperprior on σ² (shape 1, mode at F·var(y)) times the evidence, a
soft floor in place of the cap.

Reads the data that `bench/accuracy export` writes (target/bench/accuracy-data/).
"""
import os
import sys
import warnings

import numpy as np
from scipy.optimize import minimize
from scipy.stats import norm
from scipy.stats import t as student

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import smooth_variants as S  # noqa: E402

LEVELS = {50: 0.674490, 80: 1.281552, 95: 1.959964}
NODES = (np.arange(4000) + 0.5) / 4000


def central_mass(t_scale, g_scale, nu):
    """q ↦ P(|t_scale·T_ν + g_scale·Z| ≤ q), averaged over the quantiles of the smaller part so
    that the larger part's distribution function is smooth in q."""
    if g_scale >= t_scale:
        t = student.ppf(NODES, nu)
        return lambda q: np.mean(norm.cdf((q - t_scale * t) / g_scale) - norm.cdf((-q - t_scale * t) / g_scale))
    z = norm.ppf(NODES)
    return lambda q: np.mean(student.cdf((q - g_scale * z) / t_scale, nu) - student.cdf((-q - g_scale * z) / t_scale, nu))


def half_width(t_scale, g_scale, nu, mass):
    """The half-width of the central interval holding `mass`, by bisection."""
    f = central_mass(t_scale, g_scale, nu)
    low, high = 0.0, 60 * (t_scale + g_scale)
    for _ in range(50):
        q = (low + high) / 2
        low, high = (q, high) if f(q) < mass else (low, q)
    return (low + high) / 2


def posterior(xc, yc, d, a, s):
    """The posterior mean's weights, the parts `φᵀΣAΣφ` (the data's, A = XᵀX/s) and `φᵀΣA₀Σφ`
    (the prior's, A₀ = I/a) at the rows of `d`, and γ, for the prior a·I and noise s on the
    centred rows `xc`, `yc`. Formed in the rows' space, `M = sI + a XXᵀ`, so that a noise
    variance near the interpolation corner (s → 0) loses nothing: `XΣ = a s M⁻¹X` and
    `Σφ = aφ − a² XᵀM⁻¹Xφ` (inverting the p × p precision `I/a + XᵀX/s` there does).
    """
    m = s * np.eye(len(yc)) + a * xc @ xc.T
    solved = np.linalg.solve(m, np.column_stack([yc, xc @ d.T]))
    weights = a * xc.T @ solved[:, 0]
    noise_part = a * a * s * np.sum(solved[:, 1:] ** 2, axis=0)
    sigma_phi = a * d.T - a * a * xc.T @ solved[:, 1:]
    prior_part = np.sum(sigma_phi ** 2, axis=0) / a
    gamma = a * np.trace(np.linalg.solve(m, xc @ xc.T))
    return weights, noise_part, prior_part, gamma


def capped_hyperparameters(x, y):
    """(a, s) maximising the evidence with γ ≤ N − 4."""
    lam, z = S.spectrum_of(x, y, np.eye(x.shape[1]))
    cap = max(len(y) - 4, 1)

    def gamma(theta):
        a, s = np.exp(theta)
        return np.sum(a * lam / (s + a * lam))

    best = None
    for a0 in (1e-4, 1e-2, 1, 1e2, 1e4):
        start = np.log([a0 / max(np.mean(lam), 1e-30), max(np.var(y) * 1e-1, 1e-12)])
        r = minimize(S.negative_log_evidence, start, args=(lam, z), method="SLSQP",
                     constraints=[{"type": "ineq", "fun": lambda th: cap - gamma(th)}])
        if r.success and (best is None or r.fun < best.fun):
            best = r
    return np.exp(best.x)


def interior_hyperparameters(x, y):
    """(a, s, found) at the evidence's best interior mode with γ ≤ N − 4 (found), or the capped
    maximum (not found).

    The profile over α = s/a (s at its optimum for each α) on a grid of log α in steps of 0.05:
    a mode is a grid point lower than both neighbours, none of which breaks the cap.
    """
    lam, z = S.spectrum_of(x, y, np.eye(x.shape[1]))
    lam = np.clip(lam, 0, None)
    dof = len(y) - 1
    cap = max(dof - 3.0, min(dof - 1.0, 1.0))
    z2 = z ** 2
    q = float(np.sum((y - y.mean()) ** 2))
    grid = np.log(max(lam.max(), 1e-300)) + np.arange(-40, 12.0, 0.05)
    values, feasible = [], []
    for g in grid:
        alpha = np.exp(g)
        misfit = max(q - np.sum(z2 * lam / (lam + alpha)), 1e-300)
        s = misfit / dof
        values.append(dof * np.log(s) + np.sum(np.log1p(lam / alpha)) + misfit / s)
        feasible.append(np.sum(lam / (lam + alpha)) <= cap)
    modes = [i for i in range(1, len(grid) - 1)
             if feasible[i - 1] and feasible[i] and values[i] < values[i - 1] and values[i] < values[i + 1]]
    if not modes:
        return (*capped_hyperparameters(x, y), False)
    i = min(modes, key=lambda j: values[j])
    alpha = np.exp(grid[i])
    misfit = q - np.sum(z2 * lam / (lam + alpha))
    s = misfit / dof
    return s / alpha, s, True


def noise_prior_hyperparameters(x, y, fraction):
    """(a, s) maximising the evidence times an inverse-gamma density of s, shape 1 and mode
    `fraction`·var(y): log p(s) = −2 log s − b/s, b = 2·fraction·var(y)."""
    lam, z = S.spectrum_of(x, y, np.eye(x.shape[1]))
    b = 2 * fraction * np.var(y)

    def objective(theta):
        return S.negative_log_evidence(theta, lam, z) + 2 * theta[1] + b / np.exp(theta[1])

    best = None
    for a0 in (1e-4, 1e-2, 1, 1e2, 1e4):
        start = np.log([a0 / max(np.mean(lam), 1e-30), max(np.var(y) * 1e-1, 1e-12)])
        r = minimize(objective, start, method="L-BFGS-B")
        if best is None or r.fun < best.fun:
            best = r
    return np.exp(best.x)


def main(argv):
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    name = argv[1] if len(argv) > 1 else "yarn"
    repeats = int(argv[2]) if len(argv) > 2 else 100
    variant = argv[3] if len(argv) > 3 else "capped"
    ds = S.A.LOADERS[name](S.DATA)
    splits = S.A.canonical_splits(ds) if repeats == 0 else S.A.random_splits(len(ds.x), 100)[:repeats]
    drawn, exact = ({level: [] for level in LEVELS} for _ in range(2))
    squares, dofs, modes = [], [], 0
    for split in splits:
        train, test = S.A.train_rows(split), split["test"]
        x, y = ds.x[train], ds.y[train, 0]
        if variant == "uncapped":
            a, s = S.hyperparameters(x, y, np.eye(x.shape[1]))[:2]
        elif variant == "interior":
            a, s, found = interior_hyperparameters(x, y)
            modes += found
        elif variant.startswith("noise="):
            a, s = noise_prior_hyperparameters(x, y, float(variant.removeprefix("noise=")))
        else:
            a, s = capped_hyperparameters(x, y)
        xm, ym = x.mean(0), y.mean()
        xc, d = x - xm, ds.x[test] - xm
        weights, noise_part, prior_part, gamma = posterior(xc, y - ym, d, a, s)
        nu = max(len(y) - 1 - gamma, 3.0)
        noise_part += s / len(y)
        variance = nu / (nu - 2) * (s + noise_part) + prior_part
        error = np.abs(ds.y[test, 0] - (ym + d @ weights))
        squares.extend(error ** 2)
        dofs.append(nu)
        for level, z in LEVELS.items():
            drawn[level].extend(error <= z * np.sqrt(variance))
            widths = [half_width(np.sqrt(s + n), np.sqrt(p), nu, level / 100) for n, p in zip(noise_part, prior_part)]
            exact[level].extend(error <= np.array(widths))
    found = f" (a mode inside the cap on {modes} of them)" if variant == "interior" else ""
    print(f"{name}, {len(splits)} split(s){found}, {variant}: RMSEP {np.sqrt(np.mean(squares)):.4g}, ν median {np.median(dofs):.3g}; "
          "coverage at 50 / 80 / 95 %: mean ± z·sd "
          + " / ".join(f"{np.mean(drawn[level]):.3f}" for level in LEVELS)
          + ", the predictive's quantiles " + " / ".join(f"{np.mean(exact[level]):.3f}" for level in LEVELS))


if __name__ == "__main__":
    main(sys.argv)
