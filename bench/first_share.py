"""Two batches instead of one: what a first fit on part of the rows costs the one-step update.

    python3 bench/first_share.py [--sets a,b,…] [--repeats N] [--shares 0.5,0.6,…] [--variant named|spectrum]
                                 [--bin PATH ...]

A plant's model rarely gets its rows in one batch. On `bench/accuracy`'s splits (the first N
random splits, or the canonical split of a set without random ones; single-output sets learnt
in one batch, so not the dyeing data), mordant is trained through its HTTP API with the default
model spec twice: on the training rows in one batch, and on the same rows in two, the first
`share` of them (in row-index order, as the splits list them) and then the rest, folded by the
default update. Both predict the split's test rows. Per share, the two-batch model's RMSEP
(root of the mean over the splits of each split's mean squared error) and CRPS as ratios to the
one-batch model's, and its 95 % coverage, pooled. A one-batch model is what an explicit refit
after the second batch answers (Algorithm 2 on the same statistics). Every binary given with
--bin runs the same splits, one after the other.

Reads the data that `bench/accuracy export` writes (target/bench/accuracy-data/).
"""
import argparse
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accuracy as A  # noqa: E402


def train_and_predict(service, ds, variant, stages, test):
    """Mean, sd and degrees of freedom (∞ for a Gaussian answer) of output 0 on `test` after the
    `stages` batches (`bench/accuracy`'s client)."""
    mean, sd, info = A.run_mordant(service, ds, variant, {"stages": stages, "test": test}, "share", False, 600)
    spread = A.answered_spread(sd, info)
    dof = spread[1][:, 0] if isinstance(spread, tuple) else np.full(len(test), np.inf)
    return mean[:, 0], sd[:, 0], dof


def pooled(parts):
    """RMSEP, 95 % coverage and mean CRPS over the splits' (truth, mean, sd, dof), each answer
    scored as the distribution it is (`bench/accuracy`'s metrics: a Student-t where it carries
    degrees of freedom)."""
    y, mean, sd, dof = (np.concatenate([p[i] for p in parts]) for i in range(4))
    rmsep = np.sqrt(np.mean([np.mean((p[0] - p[1]) ** 2) for p in parts]))
    inside = np.abs(y - mean) <= A.half_widths(sd, dof, 0.95)
    return rmsep, np.mean(inside), A.student_crps(y, mean, sd, dof).mean()


def main(argv):
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="gasoline,yarn,tecator-fat,tecator-moisture,tecator-protein,"
                                          "fermentation,fermentation-sg")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--shares", default="0.6,0.7,0.8,0.9")
    parser.add_argument("--variant", default="named", choices=("named", "spectrum"))
    parser.add_argument("--bin", action="append")
    args = parser.parse_args(argv[1:])
    binaries = args.bin or [os.path.join(A.ROOT, "target/release/mordant")]
    shares = [float(s) for s in args.shares.split(",")]
    if not all(0 < share < 1 for share in shares):
        sys.exit("--shares: each share must lie strictly between 0 and 1")
    print(f"{args.variant} inputs; per share of the rows in the first batch: two-batch RMSEP / one-batch RMSEP, "
          "95 % coverage, CRPS / one-batch CRPS")
    print()
    print("| build | target | splits | one batch: RMSEP, coverage | "
          + " | ".join(f"first {share:.0%}" for share in shares) + " |")
    print("| --- | --- | --- | --- | " + " | ".join("---" for _ in shares) + " |")
    for binary in binaries:
        service = A.Service(binary)
        try:
            for name in args.sets.split(","):
                ds = A.LOADERS[name](A.DATA_DIR)
                if ds.y.shape[1] != 1:
                    sys.exit(f"{name}: first_share.py scores single-output sets only")
                if args.variant == "spectrum" and not ds.spectrum_cols:
                    continue
                splits = (A.random_splits(len(ds.x), args.repeats) if name in A.RANDOM_SPLIT_DATASETS
                          else A.canonical_splits(ds))
                one, two = [], {share: [] for share in shares}
                for split in splits:
                    rows, test = split["stages"][0], split["test"]
                    truth = ds.y[test][:, 0]
                    one.append((truth, *train_and_predict(service, ds, args.variant, [rows], test)))
                    for share in shares:
                        cut = min(max(int(round(share * len(rows))), 1), len(rows) - 1)
                        stages = [rows[:cut], rows[cut:]]
                        two[share].append((truth, *train_and_predict(service, ds, args.variant, stages, test)))
                rmsep, coverage, crps = pooled(one)
                cells = []
                for share in shares:
                    r, c, k = pooled(two[share])
                    cells.append(f"{r / rmsep:.3f}, {c:.3f}, {k / crps:.3f}")
                print(f"| {binary} | {name} | {len(splits)} | {rmsep:.4g}, {coverage:.3f} | "
                      + " | ".join(cells) + " |", flush=True)
        finally:
            service.stop()


if __name__ == "__main__":
    main(sys.argv)
