"""The smooth prior with a nugget, tried outside the service in numpy (ACCURACY.md, "Tried and
not adopted: a nugget on the smooth prior").

    python3 bench/smooth_nugget.py gasoline|yarn|tecator-moisture|... [REPEATS]

`bench/smooth_variants.py`'s Matérn-3/2 prior, w ~ N(0, a K_ℓ), against the prior
w ~ N(0, a (K_ℓ + r I)): a curve plus band-by-band departures from it, the ratio r among
{0, 10⁻³, 10⁻², 10⁻¹, 1} picked by the evidence with ℓ, a and
σ² by the evidence. Splits are bench/accuracy.py's (canonical, then REPEATS random ones,
default 20); reads what `bench/accuracy export` writes.
"""
import sys
import warnings

import numpy as np

import smooth_variants as S

RATIOS = [0.0, 1e-3, 1e-2, 1e-1, 1.0]


def fits(x, y, x_test):
    """(score, mean, variance, r) of the Matérn-3/2 prior plus nugget at every ℓ and r, the
    evidence charged log 17 for ℓ and log 5 for r."""
    p = x.shape[1]
    charge = np.log(len(S.LENGTHS)) + np.log(len(RATIOS))
    found = []
    for length in S.LENGTHS:
        k = S.kernel("m32", p, length)
        for r in RATIOS:
            mean, var, evidence = S.fit(x, y, k + r * np.eye(p), x_test)
            found.append((evidence - charge, mean, var, r))
    return found


def main(argv):
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    name = argv[1] if len(argv) > 1 else "yarn"
    repeats = int(argv[2]) if len(argv) > 2 else 20
    ds = S.A.LOADERS[name](S.DATA)
    for scheme, splits in (("canonical", S.A.canonical_splits(ds)),
                           ("random", S.A.random_splits(len(ds.x), 100)[:repeats])):
        variants = {"Matérn-3/2": [0.0], "Matérn-3/2 + nugget": RATIOS}
        squares = {v: [] for v in variants}
        covered = {v: [] for v in variants}
        picked = []
        for split in splits:
            train, test = S.A.train_rows(split), split["test"]
            truth = ds.y[test, 0]
            found = fits(ds.x[train], ds.y[train, 0], ds.x[test])
            for variant, ratios in variants.items():
                # Every candidate of a variant carries the same charge: the first best wins.
                _, mean, var, r = max((f for f in found if f[3] in ratios), key=lambda f: f[0])
                squares[variant].extend((truth - mean) ** 2)
                covered[variant].extend(np.abs(truth - mean) <= S.A.Z95 * np.sqrt(var))
                if len(ratios) > 1:
                    picked.append(r)
        print(f"{name} {scheme} ({len(splits)} splits): RMSEP / 95 % coverage")
        for variant in variants:
            print(f"  {variant:22s} {np.sqrt(np.mean(squares[variant])):.4f} / {np.mean(covered[variant]):.3f}")
        print("  nugget ratios picked:", {r: picked.count(r) for r in RATIOS if picked.count(r)})


if __name__ == "__main__":
    main(sys.argv)
