"""The Student-t predictive's degrees of freedom, tried outside the service in numpy
(ACCURACY.md, "Tried and not adopted: the Student-t's degrees of freedom").

    python3 bench/student_dof.py [REPEATS]      (after `bench/accuracy export`; default 100)

The service's ridge (named inputs) and smooth (declared spectrum) fits, replicated: flat
intercept, the prior a·K (K = I for ridge, Matérn-3/2 over the bands at 17 length scales for
smooth, charged 2 log 17 for the choice), a and σ² = s by the evidence keeping three residual
degrees of freedom (`named_variants.shared_scale`: the scale on a grid of 0.25 e-folds, so
close to the service's fit, not equal), and the predictive variance κ (s + φᵀΣφ + s/N) with
the prior's variance along directions the rows never spanned. Intervals are ±1.96 standard
deviations of that variance, as bench/accuracy scores the service's. Four choices of κ are
compared on bench/accuracy.py's splits:

* residual: ν = N − 1 − γ (at least 3), κ = ν/(ν − 2): the service's (MacKay's effective
  degrees of freedom of σ² with the weights' prior independent of it);
* conjugate: ν = N − 1: the Student-t when the weights' prior scales with σ² (at the
  evidence's fixed point its scale is the same s), here by its variance;
* plug-in: κ = 1;
* noise-driven: the residual κ on what the noise drives only, `κ (s + s/N + φᵀΣGΣφ/s) +
  φᵀΣA⁻¹Σφ`. With the weights' prior `A` independent of σ² (the model whose degrees of freedom
  the residual κ counts), the prior's own part `ΣA⁻¹Σ` of `Σ = ΣA⁻¹Σ + ΣGΣ/s` does not scale
  with σ²: along directions the rows never spanned, σ²'s uncertainty does not widen the answer.
"""
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accuracy as A  # noqa: E402
import named_variants as NV  # noqa: E402
import smooth_variants as SV  # noqa: E402


def fit(x, y, x_test, kinds):
    """Posterior mean at x_test and the predictive variance under each choice of κ."""
    n = len(y)
    xm, ym = x.mean(0), y.mean()
    xc, yc = x - xm, y - ym
    best = None
    for kind in kinds:
        for length in [None] if kind == "ridge" else SV.LENGTHS:
            k = SV.kernel(kind, x.shape[1], length or 1.0)
            lam, u = np.linalg.eigh(xc @ k @ xc.T)
            lam = np.clip(lam, 0, None)
            # The centred rows' Gram has the constant direction at 0: left out, with round-off.
            keep = (np.abs(u.T @ (np.ones(n) / np.sqrt(n))) < 0.5) & (lam > 1e-12 * lam.max())
            z = u.T @ yc
            objective, alpha, s = NV.shared_scale(lam[keep], z[keep] ** 2,
                                                  yc @ yc - np.sum(z[keep] ** 2), n - 1)
            objective += 0 if kind == "ridge" else 2 * np.log(len(SV.LENGTHS))
            if best is None or objective < best[0]:
                best = (objective, k, alpha, s, np.sum(lam[keep] / (lam[keep] + alpha)))
    _, k, alpha, s, gamma = best
    a = s / alpha
    dx = x_test - xm
    solve = np.linalg.solve(s * np.eye(n) + a * xc @ k @ xc.T,
                            np.column_stack([yc, a * xc @ k @ dx.T]))
    mean = ym + dx @ (a * k @ xc.T @ solve[:, 0])
    prior = a * np.einsum("ij,jk,ik->i", dx, k, dx)
    posterior = prior - np.einsum("ij,ji->i", a * dx @ k @ xc.T, solve[:, 1:])
    scale2 = s + np.maximum(posterior, 0) + s / n
    nus = {"residual": max(n - 1 - gamma, 3.0), "conjugate": n - 1.0, "plug-in": None}
    out = {label: scale2 * (1.0 if nu is None else nu / (nu - 2)) for label, nu in nus.items()}
    # φᵀΣφ = φᵀΣA⁻¹Σφ + φᵀΣGΣφ/s: the prior's part and the part the noise drives, which in
    # the rows' dual form is s‖(sI + C)⁻¹c‖² (C = aXKXᵀ, c = aXKφ: `solve`'s columns).
    post = np.maximum(posterior, 0)
    driven = np.minimum(s * np.sum(solve[:, 1:] ** 2, axis=0), post)
    kappa = nus["residual"] / (nus["residual"] - 2)
    out["noise-driven"] = kappa * (s + s / n + driven) + (post - driven)
    return mean, out


def main(argv):
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    repeats = int(argv[1]) if len(argv) > 1 else 100
    print("data set, split, prior: RMSEP; 95 % coverage / interval score / CRPS for κ residual, conjugate,"
          " plug-in, and κ on the noise-driven part only")
    for name in ("gasoline", "yarn", "fermentation", "fermentation-sg"):
        ds = A.LOADERS[name](NV.DATA)
        splits = A.random_splits(len(ds.x), repeats) if name in ("gasoline", "yarn") else A.canonical_splits(ds)
        priors = {"ridge": ["ridge"], "smooth": ["ridge", "m32"]} if ds.grid else {"ridge": ["ridge"]}
        for prior, kinds in priors.items():
            errors, covered, score, crps = [], {}, {}, {}
            for split in splits:
                train, test = A.train_rows(split), split["test"]
                truth = ds.y[test, 0]
                mean, variances = fit(ds.x[train], ds.y[train, 0], ds.x[test], kinds)
                errors.extend((truth - mean) ** 2)
                for label, var in variances.items():
                    sd = np.sqrt(var)
                    covered.setdefault(label, []).extend(np.abs(truth - mean) <= A.Z95 * sd)
                    score.setdefault(label, []).extend(A.interval_score(truth, mean, sd))
                    crps.setdefault(label, []).extend(A.gaussian_crps(truth, mean, sd))
            cells = "; ".join(f"{label} {np.mean(covered[label]):.3f} / {np.mean(score[label]):.4g}"
                              f" / {np.mean(crps[label]):.4g}" for label in covered)
            print(f"{name}, {len(splits)} split(s), {prior}: {np.sqrt(np.mean(errors)):.4g}; {cells}")


if __name__ == "__main__":
    main(sys.argv)
