"""The hyperparameters' uncertainty in the predictive, tried outside the service in numpy
(ACCURACY.md, "Tried and not adopted: the hyperparameters integrated").

    python3 bench/hyper_marginal.py [REPEATS] [DATA SETS]   (after `bench/accuracy export`;
                                                            default 100, gasoline,yarn,…)

The service fits one shape (ridge, or the smooth prior at one of 17 length scales) and one
amplitude per output by the evidence, and predicts as if they were known. The replica of
bench/student_dof.py (flat intercept, σ² by the evidence keeping three residual degrees of
freedom, the Student-t on what the noise drives) is compared here with predictives that count
their uncertainty, each candidate weighted by its evidence (the amplitude on its grid of 0.25
e-folds, a flat prior in log α; each length scale charged 2 log 17, as the service charges the
choice):

* plug-in: the evidence's best shape and amplitude (the service's rule);
* amplitude: the best shape, the moments of the mixture over the amplitude's grid (the plug-in
  mean kept, the spread of the means added to the variance);
* both: the mixture over shapes and amplitudes, its own mean and variance (Bayesian model
  averaging of the hyperparameters);
* both, plug-in mean: the plug-in mean, the mixture's variance about it;
* shapes: the mixture over shapes, each at its own evidence-maximising amplitude (what a model
  that kept one posterior per candidate shape would answer);
* mixed kernel: one more candidate shape, the kernel `Σ_j π_j a_j K_j` that has the mixture's
  prior second moment (π_j the shapes' evidence weights, a_j their amplitudes), picked by the
  evidence against the others as any shape is.

A model keeps one posterior per output, updated by one step per batch; all but the plug-in and
the mixed kernel need a posterior per candidate (or per quadrature node), the mixed kernel a
kernel of its own per output.
"""
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accuracy as A  # noqa: E402
import named_variants as NV  # noqa: E402
import smooth_variants as SV  # noqa: E402

PENALTY = 2 * np.log(len(SV.LENGTHS))


def shape(xc, yc, k, penalty):
    """The eigenpairs of X K Xᵀ (the centring direction left out) and the evidence on the
    amplitude's grid: [(−2 log evidence, α, s, γ)], as `named_variants.shared_scale` scans it."""
    n = len(yc)
    lam, u = np.linalg.eigh(xc @ k @ xc.T)
    lam = np.clip(lam, 0, None)
    keep = (np.abs(u.T @ (np.ones(n) / np.sqrt(n))) < 0.5) & (lam > 1e-12 * lam.max())
    lam, u = lam[keep], u[:, keep]
    z2 = (u.T @ yc) ** 2
    q, dof = yc @ yc, n - 1
    cap = max(dof - NV.MIN_RESIDUAL_DOF, min(dof - 1.0, 1.0))
    grid = []
    for log_alpha in np.log(lam.max()) + np.arange(-40, 12.25, 0.25):
        alpha = np.exp(log_alpha)
        gamma = np.sum(lam / (lam + alpha))
        if gamma > cap:
            continue
        misfit = max(q - np.sum(z2 * lam / (lam + alpha)), 0.0)
        s = max(misfit / dof, 1e-300)
        grid.append((dof * np.log(s) + np.sum(np.log1p(lam / alpha)) + misfit / s + penalty,
                     alpha, s, gamma))
    return {"k": k, "lam": lam, "u": u, "grid": grid}


def predictive(sh, xc, yc, dx, alpha, s, gamma):
    """Mean (centred) and variance at dx: κ (s + s/N + driven) + the prior's own part."""
    n, lam, u, k = len(yc), sh["lam"], sh["u"], sh["k"]
    if sh.get("dx") is not dx:
        # The projections of the test rows depend on the shape only: formed once per shape,
        # not once per grid point.
        sh["dx"], sh["uc"], sh["quad"] = dx, u.T @ (xc @ k @ dx.T), np.einsum("ij,jk,ik->i", dx, k, dx)
    uc = sh["uc"]
    mean = (uc * ((u.T @ yc) / (alpha + lam))[:, None]).sum(0)
    a = s / alpha
    post = np.maximum(a * (sh["quad"] - np.sum(uc ** 2 / (alpha + lam)[:, None], 0)), 0)
    driven = np.minimum(s * np.sum(uc ** 2 / ((alpha + lam) ** 2)[:, None], 0), post)
    nu = max(n - 1 - gamma, 3.0)
    return mean, nu / (nu - 2) * (s + s / n + driven) + (post - driven)


def mixture(points, xc, yc, dx, anchor=None):
    """Moments of the evidence-weighted mixture over (shape, grid point) pairs, about its own
    mean or about `anchor`."""
    objective = np.array([g[0] for _, g in points])
    w = np.exp(-(objective - objective.min()) / 2)
    w /= w.sum()
    kept = w > 1e-6
    w = w[kept] / w[kept].sum()
    moments = [predictive(sh, xc, yc, dx, *g[1:]) for (sh, g), k in zip(points, kept) if k]
    means, variances = np.array([m for m, _ in moments]), np.array([v for _, v in moments])
    centre = w @ means if anchor is None else anchor
    return centre, w @ (variances + (means - centre) ** 2)


def fit(x, y, x_test, kinds):
    xm, ym = x.mean(0), y.mean()
    xc, yc, dx = x - xm, y - ym, x_test - xm
    shapes = [shape(xc, yc, SV.kernel(kind, x.shape[1], length or 1.0), 0 if kind == "ridge" else PENALTY)
              for kind in kinds for length in ([None] if kind == "ridge" else SV.LENGTHS)]
    points = [(sh, g) for sh in shapes for g in sh["grid"]]
    best_shape, best = min(points, key=lambda p: p[1][0])
    weight = np.exp(-(np.array([g[0] for _, g in points]) - best[0]) / 2)
    share = weight[[sh is best_shape for sh, _ in points]].sum() / weight.sum()
    mean, var = predictive(best_shape, xc, yc, dx, *best[1:])
    out = {"plug-in": (mean, var)}
    out["amplitude"] = mixture([(best_shape, g) for g in best_shape["grid"]], xc, yc, dx, anchor=mean)
    out["both"] = mixture(points, xc, yc, dx)
    out["both, plug-in mean"] = mixture(points, xc, yc, dx, anchor=mean)
    out["shapes"] = mixture([(sh, min(sh["grid"], key=lambda g: g[0])) for sh in shapes], xc, yc, dx)
    if len(shapes) > 1:
        weights = []
        for sh in shapes:
            top = min(sh["grid"], key=lambda g: g[0])
            weights.append((top[0], top[2] / top[1]))
        objective = np.array([o for o, _ in weights])
        pi = np.exp(-(objective - objective.min()) / 2)
        pi /= pi.sum()
        mixed = shape(xc, yc, sum(p * a * sh["k"] for p, (_, a), sh in zip(pi, weights, shapes)), PENALTY)
        top = min(mixed["grid"], key=lambda g: g[0])
        out["mixed kernel"] = predictive(mixed, xc, yc, dx, *top[1:]) if top[0] < best[0] else (mean, var)
    return {label: (ym + m, v) for label, (m, v) in out.items()}, share


def main(argv):
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    repeats = int(argv[1]) if len(argv) > 1 else 100
    names = argv[2].split(",") if len(argv) > 2 else ["gasoline", "yarn", "fermentation", "fermentation-sg"]
    print("data set, splits, prior: per predictive, RMSEP; 95 % coverage / interval score / CRPS")
    for name in names:
        ds = A.LOADERS[name](NV.DATA)
        schemes = {"canonical": A.canonical_splits(ds)}
        if name in ("gasoline", "yarn"):
            schemes["random"] = A.random_splits(len(ds.x), repeats)
        priors = {"ridge": ["ridge"], "smooth": ["ridge", "m32"]} if ds.grid else {"ridge": ["ridge"]}
        for scheme, splits in schemes.items():
            for prior, kinds in priors.items():
                scores, shares = {}, []
                for split in splits:
                    train, test = A.train_rows(split), split["test"]
                    truth = ds.y[test, 0]
                    predictives, share = fit(ds.x[train], ds.y[train, 0], ds.x[test], kinds)
                    shares.append(share)
                    for label, (mean, var) in predictives.items():
                        sd = np.sqrt(var)
                        cell = scores.setdefault(label, ([], [], [], []))
                        cell[0].extend((truth - mean) ** 2)
                        cell[1].extend(np.abs(truth - mean) <= A.Z95 * sd)
                        cell[2].extend(A.interval_score(truth, mean, sd))
                        cell[3].extend(A.gaussian_crps(truth, mean, sd))
                cells = "; ".join(f"{label} {np.sqrt(np.mean(e)):.4g}, {np.mean(c):.3f} / {np.mean(i):.4g} / {np.mean(r):.4g}"
                                  for label, (e, c, i, r) in scores.items())
                print(f"{name}, {scheme} ×{len(splits)}, {prior}: {cells}; the best shape's share of the"
                      f" evidence's weight {np.min(shares):.2f}–{np.max(shares):.2f} (median {np.median(shares):.2f})",
                      flush=True)


if __name__ == "__main__":
    main(sys.argv)
