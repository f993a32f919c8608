"""The smooth prior's kernel, and priors blind to a baseline, tried outside the service in numpy
(ACCURACY.md, "Tried and not adopted: other smooth priors").

    python3 bench/smooth_variants.py NAME [REPEATS] [derivatives]

The model is the service's smooth prior: flat intercept (x and y centred), w ~ N(0, a K_ℓ),
y | w ~ N(Xw, s I). The amplitude a and the noise s maximise the evidence,
log p(y) = −½ Σ_i [log(s + a λ_i) + z_i² / (s + a λ_i)] over the eigenpairs (λ_i, u_i) of
X K Xᵀ (z = Uᵀy, the centring direction left out), and ℓ is picked by the evidence from
17 candidates (½ band to 128 bands). A variant list is picked among by the evidence too.
Splits are bench/accuracy.py's (canonical, then REPEATS random ones, default 20).

`derivatives` tries instead ridge and Matérn-3/2 on the spectrum's first and second
differences (d1, d2, d1m32, d2m32): chemometrics' derivative preprocessing, `w = Dᵀv` with
`v ~ N(0, a K)`, so `w ~ N(0, a DᵀKD)`, blind to an offset (and a slope for d2).
"""
import os
import sys
import warnings

import numpy as np
from scipy.optimize import minimize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accuracy as A  # noqa: E402

DATA = os.path.join(A.ROOT, "target/bench/accuracy-data")
LENGTHS = 0.5 * 2 ** (np.arange(17) / 2)


def kernel(kind, p, length):
    if kind.startswith(("d1", "d2")):
        order = int(kind[1])
        diff = np.diff(np.eye(p), n=order, axis=0)
        return diff.T @ kernel(kind[2:] or "ridge", p - order, length) @ diff + 1e-10 * np.eye(p)
    d = np.abs(np.subtract.outer(np.arange(p), np.arange(p))).astype(float)
    base = kind[:3]
    if base == "m12":
        k = np.exp(-d / length)
    elif base == "m32":
        t = np.sqrt(3) * d / length
        k = (1 + t) * np.exp(-t)
    elif base == "m52":
        t = np.sqrt(5) * d / length
        k = (1 + t + t * t / 3) * np.exp(-t)
    elif base == "rbf":
        k = np.exp(-0.5 * (d / length) ** 2)
    else:
        return np.eye(p)
    if kind.endswith(("p0", "p1")):
        # Blind to a constant offset (p0) or to an offset and a slope (p1) of the spectrum.
        t = np.arange(p) / p
        basis = np.ones((p, 1)) if kind.endswith("p0") else np.column_stack([np.ones(p), t - t.mean()])
        q, _ = np.linalg.qr(basis)
        projector = np.eye(p) - q @ q.T
        k = projector @ k @ projector + 1e-10 * np.eye(p)
    return k


def spectrum_of(x, y, k):
    """The eigenvalues of X K Xᵀ on the centred rows and y's coordinates in their eigenvectors,
    the centring direction left out: what the evidence of the prior a·k reads."""
    xc, yc = x - x.mean(0), y - y.mean()
    n = len(y)
    lam, u = np.linalg.eigh(xc @ k @ xc.T)
    lam = np.clip(lam, 0, None)
    z = u.T @ yc
    keep = np.abs(u.T @ (np.ones(n) / np.sqrt(n))) < 0.5
    return lam[keep], z[keep]


def negative_log_evidence(theta, lam, z):
    """−log p(y) (up to a constant) at (a, s) = exp(theta), from `spectrum_of`'s (lam, z)."""
    a, s = np.exp(theta)
    v = s + a * lam
    return 0.5 * np.sum(np.log(v)) + 0.5 * np.sum(z ** 2 / v)


def hyperparameters(x, y, k):
    """The amplitude a and noise s that maximise the evidence of the prior a·k on the centred
    rows, with the log evidence."""
    lam_k, z_k = spectrum_of(x, y, k)
    best = None
    for a0 in (1e-4, 1e-2, 1, 1e2, 1e4):
        start = np.log([a0 / max(np.mean(lam_k), 1e-30), max(np.var(y) * 1e-2, 1e-12)])
        r = minimize(negative_log_evidence, start, args=(lam_k, z_k), method="L-BFGS-B")
        if best is None or r.fun < best.fun:
            best = r
    a, s = np.exp(best.x)
    return a, s, -best.fun


def fit(x, y, k, x_test, held=None):
    """Posterior mean and predictive variance at x_test, and the log evidence; at the
    hyperparameters `held` = (a, s) where given (the evidence is then None), else at the
    evidence's."""
    xm, ym = x.mean(0), y.mean()
    xc, yc = x - xm, y - ym
    n = len(y)
    a, s, evidence = hyperparameters(x, y, k) if held is None else (*held, None)
    gram = xc @ k @ xc.T
    solve = np.linalg.solve(s * np.eye(n) + a * gram, np.column_stack([yc, a * xc @ k @ (x_test - xm).T]))
    w = a * k @ xc.T @ solve[:, 0]
    mean = ym + (x_test - xm) @ w
    cross = a * (x_test - xm) @ k @ xc.T
    prior = a * np.einsum("ij,jk,ik->i", x_test - xm, k, x_test - xm)
    posterior = prior - np.einsum("ij,ji->i", cross, solve[:, 1:])
    return mean, s + np.maximum(posterior, 0) + s / n, evidence


def best_of(x, y, x_test, kinds):
    """The variant (and length scale) of `kinds` with the largest evidence, charged log 17 for
    the choice of a length scale."""
    best = None
    for kind in kinds:
        for length in ([None] if kind in ("ridge", "d1", "d2") else LENGTHS):
            mean, var, evidence = fit(x, y, kernel(kind, x.shape[1], length or 1.0), x_test)
            score = evidence - (0 if length is None else np.log(len(LENGTHS)))
            if best is None or score > best[2]:
                best = (mean, var, score)
    return best


VARIANTS = {"m12": ["m12"], "m32": ["m32"], "m52": ["m52"], "rbf": ["rbf"], "ridge": ["ridge"],
            "m32p0": ["m32p0"], "m32p1": ["m32p1"], "evidence picks": ["ridge", "m32", "m52", "rbf"]}
DERIVATIVES = {"m32": ["m32"], "ridge": ["ridge"], "d1": ["d1"], "d2": ["d2"], "d1m32": ["d1m32"],
               "d2m32": ["d2m32"], "evidence picks": ["ridge", "m32", "d1", "d2", "d1m32", "d2m32"]}


def main(argv):
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    name = argv[1] if len(argv) > 1 else "gasoline"
    repeats = int(argv[2]) if len(argv) > 2 else 20
    variants = DERIVATIVES if len(argv) > 3 and argv[3] == "derivatives" else VARIANTS
    ds = A.LOADERS[name](DATA)
    for scheme, splits in (("canonical", A.canonical_splits(ds)), ("random", A.random_splits(len(ds.x), repeats))):
        errors = {v: [] for v in variants}
        covered = {v: [] for v in variants}
        for split in splits:
            train, test = A.train_rows(split), split["test"]
            for variant, kinds in variants.items():
                mean, var, _ = best_of(ds.x[train], ds.y[train, 0], ds.x[test], kinds)
                truth = ds.y[test, 0]
                errors[variant].append(np.mean((truth - mean) ** 2))
                covered[variant].extend(np.abs(truth - mean) <= A.Z95 * np.sqrt(var))
        print(f"{name} {scheme} ({len(splits)} splits): RMSEP / 95 % coverage")
        for variant in variants:
            print(f"  {variant:15s} {np.sqrt(np.mean(errors[variant])):.4f} / {np.mean(covered[variant]):.3f}")


if __name__ == "__main__":
    main(sys.argv)
