"""An instrument replaced with an overlap: the transfer map of `crates/estimator/src/transfer.rs`,
tried in numpy on gasoline before the service serves it (ACCURACY.md, "An instrument replaced
with an overlap: the map, in numpy").

    python3 bench/instrument_map.py [REPEATS]      # after `bench/accuracy export`

A new instrument is simulated on gasoline's real spectra: it reads each spectrum 3 nm (1.5
bands) further, with a gain of 0.95, on the old grid, and then on a coarser one (every 4 nm).
Per repeat (seed r): 15 test rows read by the new instrument; the other 45 are the old
instrument's calibration rows, of which the first T (30, then 10) are transfer samples read by
both. Every method sees the same rows:

* PLS + PDS: PLS (components by 5-fold CV) on the 45 old rows; piecewise direct
  standardisation from the T pairs (local principal-component regression, window and
  components by leave-one-out reconstruction error on the pairs; "oracle" picks them on the
  test rows instead, a bound no user has);
* PLS refit on both instruments' rows (the new spectra interpolated onto the old grid);
* the map path: mordant's smooth prior on the old rows, predicting the reconstructed old
  reading with the map's variance added; the own path: the smooth prior on the T new rows;
  their combinations (the estimator's `transfer::combine`, and the product of the two
  predictives as they stand, which counts the noise twice).
"""
import os
import sys
import warnings

import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accuracy as A
import smooth_variants as S
from pds import pds, pds_by_loo
warnings.filterwarnings("ignore")

ds = A.LOADERS["gasoline"](os.path.join(A.ROOT, "target/bench/accuracy-data"))
X, Y = ds.x, ds.y[:, 0]
p = X.shape[1]
bands = np.arange(p, dtype=float)


def new_read(x, shift=1.5, gain=0.95, offset=0.0, grid=None):
    """new instrument: reads the spectrum at (band + shift), gain, offset; on `grid` (band
    positions on the old grid) or the old grid."""
    g = bands if grid is None else grid
    return gain * np.vstack([np.interp(g + shift, bands, r) for r in x]) + offset


def smooth_fit(x, y):
    """mordant's smooth prior: best length by evidence; returns (predict fn)."""
    best = None
    for length in S.LENGTHS:
        k = S.kernel("m32", x.shape[1], length)
        ev = S.hyperparameters(x, y, k)[2]
        if best is None or ev > best[0]:
            best = (ev, k)
    k = best[1]
    xm, ym = x.mean(0), y.mean()
    xc, yc = x - xm, y - ym
    n = len(y)
    a, s, _ = S.hyperparameters(x, y, k)
    # weight-space posterior (p × p)
    prior = a * k
    # Σ = (prior^-1 + XᵀX/s)^-1 = prior - prior Xᵀ (s I + X prior Xᵀ)^-1 X prior
    m = s * np.eye(n) + xc @ prior @ xc.T
    sol = np.linalg.solve(m, xc @ prior)
    cov = prior - prior @ xc.T @ sol
    w = prior @ xc.T @ np.linalg.solve(m, yc)

    def predict(xt, extra_cov=None):
        d = xt - xm
        mean = ym + d @ w
        var = s + s / n + np.einsum("ij,jk,ik->i", d, cov, d)
        if extra_cov is not None:
            var = var + extra_cov
        return mean, np.maximum(var, 1e-30)

    predict.w, predict.cov, predict.s = w, cov, s
    return predict


def interp_weights(new_pos, old_pos):
    """matrix (len(old) × len(new)) interpolating new-grid values at old positions."""
    W = np.zeros((len(old_pos), len(new_pos)))
    for j, t in enumerate(old_pos):
        k = np.searchsorted(new_pos, t)
        if k <= 0:
            W[j, 0] = 1
        elif k >= len(new_pos):
            W[j, -1] = 1
        else:
            f = (t - new_pos[k - 1]) / (new_pos[k] - new_pos[k - 1])
            W[j, k - 1], W[j, k] = 1 - f, f
    return W


def residual_cap(dof):
    return max(dof - 3.0, min(dof - 1.0, 1.0))


def bayes_map(zt, xt, new_pos, old_pos, windows=(0, 1, 2, 4, 8, 16), taus=10.0 ** (np.arange(-6, 17) / 2)):
    """The estimator's transfer map (crates/estimator/src/transfer.rs) in numpy: per old band the
    interpolated pair of new bands and `w` more each side, prior mean = interpolation,
    noise-scaled isotropic prior, Jeffreys on s_j; (w, a) by the summed evidence among fits that
    keep residual_cap's degrees of freedom."""
    n = len(zt)
    zm, xm = zt.mean(0), xt.mean(0)
    zc, xc = zt - zm, xt - xm
    M0 = interp_weights(new_pos, old_pos)
    R = xc - zc @ M0.T
    G = zc.T @ zc
    q = len(new_pos)
    unit = 1.0 / (np.trace(G) / (q * (n - 1)))
    cap = residual_cap(n - 1.0)
    spacing = new_pos[1] - new_pos[0]

    def window_of(t, w):
        u = np.clip((t - new_pos[0]) / spacing, 0, q - 1)
        low = min(int(np.floor(u)), q - 2)
        return np.arange(max(low - w, 0), min(low + 1 + w, q - 1) + 1)

    def band(sel, j, a):
        g = G[np.ix_(sel, sel)]
        c = zc[:, sel].T @ R[:, j]
        rr = R[:, j] @ R[:, j]
        A_ = g + np.eye(len(sel)) / a
        Ainv = np.linalg.inv(A_)
        sol = Ainv @ c
        logdet = np.linalg.slogdet(A_)[1] + len(sel) * np.log(a)
        quad = max(rr - c @ sol, 1e-12 * max(rr, 1e-300) + 1e-300)
        dof = len(sel) - np.trace(Ainv) / a
        return -0.5 * logdet - 0.5 * (n - 1) * np.log(quad), dof, sol, Ainv, quad

    best = None
    for w in windows:
        idx = [window_of(t, w) for t in old_pos]
        for tau in taus:
            a = tau * unit
            total, ok = 0.0, True
            for j, sel in enumerate(idx):
                ev, dof, _, _, _ = band(sel, j, a)
                if dof > cap:
                    ok = False
                    break
                total += ev
            if ok and (best is None or total > best[0]):
                best = (total, w, a, idx)
    _, w, a, idx = best
    M = M0.copy()
    P, scale = [], []
    for j, sel in enumerate(idx):
        _, _, sol, Ainv, quad = band(sel, j, a)
        M[j, sel] += sol
        P.append(Ainv)
        scale.append(quad / (n - 3))
    E = xc - zc @ M.T
    ee = E.T @ E
    sd = np.sqrt(np.maximum(np.diag(ee), 0))
    corr = np.where(np.outer(sd, sd) > 0, ee / np.maximum(np.outer(sd, sd), 1e-300), 0.0)
    np.fill_diagonal(corr, 1.0)
    scale = np.array(scale)

    def reconstruct(z):
        d = z - zm
        xhat = xm + d @ M.T
        lev = np.column_stack([np.einsum("ij,jk,ik->i", d[:, sel], P[j], d[:, sel]) for j, sel in enumerate(idx)])
        return xhat, scale * (1 + 1.0 / n + lev)

    def added(xvar, beta, cov=None):
        """Var(βᵀx̂) per row; with the model's posterior covariance, also E[tr(Σ Cov x̂)]."""
        u = beta[None, :] * np.sqrt(xvar)
        total = np.einsum("ij,jk,ik->i", u, corr, u)
        if cov is not None:
            sd = np.sqrt(xvar)
            total = total + np.einsum("ij,jk,ik->i", sd, cov * corr, sd)
        return total

    reconstruct.info = (w, a / unit)
    reconstruct.added = added
    return reconstruct


def pls_cv(x, y):
    return A.fit_pls(x, y[:, None], x)


def pls_fit_predict(x, y, xt):
    mean = A.fit_pls(x, y[:, None], xt)
    return (mean[0] if isinstance(mean, tuple) else mean).ravel()


def run(shift=1.5, gain=0.95, offset=0.0, grid=None, transfer=30, repeats=20):
    new_pos = bands if grid is None else grid
    Z = new_read(X, shift, gain, offset, grid)
    res = {}
    cov = {}
    for seed in range(repeats):
        perm = np.random.default_rng(seed).permutation(len(X))
        test, cal = perm[:15], perm[15:]
        tr = cal[:transfer]
        yt = Y[test]
        out = {}
        # peers
        oldpls = lambda xx: pls_fit_predict(X[cal], Y[cal], xx)
        bestpds = None
        for k in (1, 2, 3, 5):
            for c in (1, 2, 3):
                mp = pds(Z[tr], X[tr], new_pos, bands, k, c)
                e = np.mean((oldpls(mp(Z[test])) - yt) ** 2)
                if bestpds is None or e < bestpds:
                    bestpds = e
        out["PLS+PDS (oracle window)"] = (bestpds, None)
        mp, _ = pds_by_loo(Z[tr], X[tr], new_pos, bands)
        out["PLS+PDS (LOO window)"] = (np.mean((oldpls(mp(Z[test])) - yt) ** 2), None)
        Zold = np.vstack([np.interp(bands, new_pos, r) for r in Z]) if grid is not None else Z
        both_x = np.vstack([X[cal], Zold[tr]])
        both_y = np.concatenate([Y[cal], Y[tr]])
        out["PLS refit both"] = (np.mean((pls_fit_predict(both_x, both_y, Zold[test]) - yt) ** 2), None)
        # mordant-like
        old = smooth_fit(X[cal], Y[cal])
        rec = bayes_map(Z[tr], X[tr], new_pos, bands)
        xhat, xvar = rec(Z[test])
        extra = rec.added(xvar, old.w)
        mA, vA = old(xhat, extra)
        out["map path"] = (np.mean((mA - yt) ** 2), (mA, vA))
        m2, v2 = old(xhat, rec.added(xvar, old.w, old.cov))
        out["map path, with the second-order term"] = (np.mean((m2 - yt) ** 2), (m2, v2))
        m0, v0 = old(X[test])
        out["old model on the old instrument's readings"] = (np.mean((m0 - yt) ** 2), (m0, v0))
        own = smooth_fit(Z[tr], Y[tr])
        mB, vB = own(Z[test])
        out["own path"] = (np.mean((mB - yt) ** 2), (mB, vB))
        prec = 1 / vA + 1 / vB
        mC = (mA / vA + mB / vB) / prec
        out["combined (both variances as they stand)"] = (np.mean((mC - yt) ** 2), (mC, 1 / prec))
        eA, eB = np.maximum(vA - old.s, 1e-30), np.maximum(vB - own.s, 1e-30)
        pe = 1 / eA + 1 / eB
        mE = (mA / eA + mB / eB) / pe
        sbar = (old.s / eA + own.s / eB) / pe
        out["combined (epistemic precision)"] = (np.mean((mE - yt) ** 2), (mE, 1 / pe + sbar))
        # own model on residual of the map path (transferred prior)
        mAtr, _ = old(rec(Z[tr])[0])
        corr = smooth_fit(Z[tr], Y[tr] - mAtr)
        mD0, vD = corr(Z[test])
        mD = mA + mD0 - 0  # corr includes intercept
        out["map + residual model"] = (np.mean((mD - yt) ** 2), (mD, vD))
        out["old model on raw new (no transfer)"] = (np.mean((old(Zold[test])[0] - yt) ** 2), None)
        for kk, (e, mv) in out.items():
            res.setdefault(kk, []).append(e)
            if mv is not None:
                cov.setdefault(kk, []).extend(np.abs(yt - mv[0]) <= 1.96 * np.sqrt(mv[1]))
        if seed == 0:
            print("map info (window, relative amplitude):", rec.info)
    print(f"shift {shift} gain {gain} offset {offset} grid {'old' if grid is None else len(grid)} transfer {transfer}")
    for kk, v in res.items():
        c = f" cov {np.mean(cov[kk]):.3f}" if kk in cov else ""
        print(f"  {kk:36s} {np.sqrt(np.mean(v)):.4f}{c}")


if __name__ == "__main__":
    numbers = [a for a in sys.argv[1:] if a.isdigit()]
    reps = int(numbers[0]) if numbers else 10
    for t in (30, 10):
        run(transfer=t, repeats=reps)
    if "--coarser" in sys.argv:
        run(transfer=30, repeats=reps, grid=np.arange(0.5, p - 1, 2.0))
